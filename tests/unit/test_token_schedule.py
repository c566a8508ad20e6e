"""When the AM gets a new set of delegation tokens (tony_py/am/tokens.py): from the dates of the
tokens in hand, not from the AM's start. Pure rule (next_set_in_s, start_wait_s), and the
renewal thread driven by a fake bridge and a fake clock."""

from __future__ import annotations

import json

import pytest

from tony_py.am import tokens

pytestmark = pytest.mark.unit

S = 1000
DAY = 86_400 * S


def token(issued_ms: int, max_lifetime_ms: int, service: str = "ha-hdfs:ns1") -> dict:
    return {"kind": "HDFS_DELEGATION_TOKEN", "service": service, "issued_ms": issued_ms,
            "max_ms": issued_ms + max_lifetime_ms}


def first_set_at_ms(start_ms: int, held: list[dict], interval_ms: int, probe_ms: int = 0) -> int:
    """When a first AM attempt started at start_ms asks for its first set: it waits
    start_wait_s (by the configured interval, here the NameNode's), probes (probe_ms), then
    waits next_set_in_s."""
    probed_at = start_ms + tokens.start_wait_s(start_ms, interval_ms, held, attempt=1) * S + probe_ms
    return int(probed_at + tokens.next_set_in_s(int(probed_at), interval_ms, held) * S)


def test_an_am_that_starts_late_gets_its_first_set_before_the_submitted_token_dies():
    """The secure lane's run (renewal interval 30 s, max lifetime 90 s): the AM started 51 s
    after the submitted tokens' issue, and the RM stopped renewing the HDFS one, which died at
    62 s. The old rule (10 s after the AM's start, then 75 % of the interval: 83.5 s) came
    after that; now the set comes at once, and the listener listens at once."""
    submitted = [token(0, 90 * S)]
    died_at, start = 62 * S, 51 * S
    assert tokens.start_wait_s(start, 30 * S, submitted, attempt=1) == 0
    assert first_set_at_ms(start, submitted, 30 * S, probe_ms=2 * S) == 53 * S < died_at
    old_rule = start + 10 * S + int(0.75 * 30 * S)
    assert old_rule > died_at  # what the job failed on


def test_a_prompt_am_waits_out_the_start_and_gets_its_set_well_before_the_first_renew_expiry():
    submitted = [token(0, 90 * S)]
    assert tokens.start_wait_s(2 * S, 30 * S, submitted, attempt=1) == tokens.START_WAIT_S
    at = first_set_at_ms(2 * S, submitted, 30 * S, probe_ms=1 * S)
    assert at == 13 * S + (30 - 13) * S // 2  # half-way from the probe to the issue date plus the interval
    assert 30 * S - at >= 8 * S


def test_production_a_day_late_am_after_a_long_queue_wait():
    """Renewal interval a day, max lifetime 7 days: an AM started 20 h after submission gets its
    first set with half of the 4 h left, not 18 h after its start (day 1.6)."""
    submitted = [token(0, 7 * DAY)]
    start = 20 * 3600 * S
    at = first_set_at_ms(start, submitted, DAY)
    assert at < DAY
    assert DAY - at == pytest.approx((DAY - start - tokens.START_WAIT_S * S) / 2, abs=S)
    # submitted an hour ago: the first set half a day after the submission, not 18 h after the start
    assert first_set_at_ms(3600 * S, submitted, DAY) == pytest.approx(DAY / 2 + 3600 * S / 2 + 5 * S, abs=S)


def test_a_fresh_set_is_replaced_half_an_interval_later():
    now = 1_700_000_000_000
    assert tokens.next_set_in_s(now, 30 * S, [token(now, 90 * S)]) == 15
    assert tokens.next_set_in_s(now, DAY, [token(now, 7 * DAY)]) == DAY / S / 2


def test_the_first_token_to_die_counts_and_a_max_date_before_the_renew_expiry():
    now = 100 * S
    held = [token(95 * S, 90 * S, "ha-hdfs:ns1"), token(80 * S, 90 * S, "hdfs://other:8020")]
    assert tokens.certain_until_ms(held, 30 * S) == 110 * S
    assert tokens.next_set_in_s(now, 30 * S, held) == 5
    near_max = [token(0, 164 * S)]  # an interval longer than what is left to its max date
    assert tokens.certain_until_ms(near_max, DAY) == 104 * S  # hdfs-native's margin before it
    assert tokens.next_set_in_s(now, DAY, near_max) == 2


def test_a_set_is_replaced_before_hdfs_native_stops_using_it():
    """hdfs-native skips a token with less than 60 s to its max date: the set that a task's
    hdfs:// client would drop counts as dead then, however long its renewal interval."""
    issued = 0
    held = [token(issued, 120 * S)]
    assert tokens.certain_until_ms(held, 300 * S) == 60 * S
    assert tokens.next_set_in_s(20 * S, 300 * S, held) == 20  # half of the 40 s left


def test_past_due_is_at_once_and_no_tokens_is_half_an_interval():
    assert tokens.next_set_in_s(200 * S, 30 * S, [token(0, 90 * S)]) == 0
    assert tokens.next_set_in_s(200 * S, 30 * S, []) == 15
    assert tokens.certain_until_ms([], 30 * S) is None


def test_a_later_attempt_listens_and_probes_at_once():
    fresh = [token(0, 90 * S)]
    assert tokens.start_wait_s(0, 30 * S, fresh, attempt=2) == 0


def test_each_set_comes_with_half_the_life_the_last_one_had_left():
    interval, issued, decided = 30 * S, 0, 7 * S
    for _ in range(20):
        until = issued + interval
        at = decided + int(tokens.next_set_in_s(decided, interval, [token(issued, 90 * S)]) * S)
        assert until - at == (until - decided) // 2
        issued = decided = at  # the new set, issued as it was asked for
    assert until - at == interval // 2


class _Stop(BaseException):
    """Ends the renewal thread's loop (it catches Exception, to go on)."""


class FakeBridge:
    """The JVM side: tokens issued at issued_ms, a new set issued at the fake clock's now."""

    def __init__(self, clock, issued_ms: int, interval_ms: int, max_lifetime_ms: int, failures: int = 0):
        self.clock, self.interval, self.max_lifetime = clock, interval_ms, max_lifetime_ms
        self.issued, self.failures, self.sets, self.probes = issued_ms, failures, [], []
        self.unreadable, self.behind = False, 0  # behind: the NameNode's clock behind the AM's

    def tokenRenewalIntervalMs(self, probe):  # noqa: N802 - the Java method's name
        if probe:
            self.probes.append(self.clock.now)
        return self.interval

    def heldTokens(self):  # noqa: N802
        if self.unreadable:
            raise RuntimeError("py4j: the dates could not be read")
        return json.dumps([token(self.issued, self.max_lifetime)])

    def renewTokensNow(self):  # noqa: N802
        if self.failures:
            self.failures -= 1
            return False
        self.issued = self.clock.now - self.behind
        self.sets.append(self.clock.now)
        return True

    def tokenRenewalError(self):  # noqa: N802
        return "the NameNode is in safe mode"


class FakeClock:
    def __init__(self, now_ms: int, until_ms: int):
        self.now, self.until = now_ms, until_ms

    def sleep(self, seconds: float) -> None:
        self.now += int(seconds * S)
        if self.now > self.until:
            raise _Stop


def run_renewal(monkeypatch, clock: FakeClock, bridge: FakeBridge, attempt: int) -> list[int]:
    listened = []
    monkeypatch.setattr(tokens.time, "sleep", clock.sleep)
    monkeypatch.setattr(tokens, "_now_ms", lambda: clock.now)
    with pytest.raises(_Stop):
        tokens._renew(bridge, attempt, lambda: listened.append(clock.now))
    return listened


def test_the_renewal_thread_of_a_late_am(monkeypatch):
    clock = FakeClock(51 * S, 120 * S)
    bridge = FakeBridge(clock, 0, 30 * S, 90 * S)
    listened = run_renewal(monkeypatch, clock, bridge, attempt=1)
    assert listened == [51 * S] and bridge.probes == [51 * S]
    assert bridge.sets == [51 * S, 66 * S, 81 * S, 96 * S, 111 * S]


def test_the_renewal_thread_of_a_prompt_am_and_a_failed_try(monkeypatch):
    clock = FakeClock(3 * S, 60 * S)
    bridge = FakeBridge(clock, 0, 30 * S, 90 * S, failures=1)
    listened = run_renewal(monkeypatch, clock, bridge, attempt=1)
    assert listened == [13 * S] and bridge.probes == [13 * S]
    # due at 13 + (30 - 13) / 2 = 21.5 s; that try fails, the next 10 s later; then 15 s apart
    assert bridge.sets == [31_500, 46_500]


def test_the_renewal_thread_of_a_later_attempt(monkeypatch):
    clock = FakeClock(500 * S, 540 * S)
    bridge = FakeBridge(clock, 500 * S, 30 * S, 90 * S)  # the set it got before it registered
    listened = run_renewal(monkeypatch, clock, bridge, attempt=2)
    assert listened == [500 * S] and bridge.probes == [500 * S]
    assert bridge.sets == [515 * S, 530 * S]


def test_the_renewal_goes_on_where_the_tokens_dates_cannot_be_read(monkeypatch):
    clock = FakeClock(3 * S, 50 * S)
    bridge = FakeBridge(clock, 0, 30 * S, 90 * S)
    bridge.unreadable = True
    listened = run_renewal(monkeypatch, clock, bridge, attempt=1)
    assert listened == [13 * S] and bridge.probes == [13 * S]
    assert bridge.sets == [28 * S, 43 * S]  # half an interval from now, each time


def test_a_namenode_clock_an_interval_behind_gets_sets_no_closer_than_min_gap(monkeypatch):
    clock = FakeClock(100 * S, 120 * S)
    bridge = FakeBridge(clock, 0, 30 * S, 90 * S)
    bridge.behind = 40 * S  # each new set looks dead already
    run_renewal(monkeypatch, clock, bridge, attempt=1)
    assert bridge.sets == [100 * S, 105 * S, 110 * S, 115 * S, 120 * S]
