"""Fencing: no two copies of a task ever run at once (tony_py/am/core/fencing.py on the AM's side,
tony_py/executor/lease.py and heartbeats.py on the executor's)."""

from __future__ import annotations

import json
import threading
import time

import pytest

from harness import Harness, wait_until
from tony_py.am.core.failover import AmSnapshot
from tony_py.am.core.fencing import MARGIN_S, Fences
from tony_py.am.http.server import AmHttpServer
from tony_py.am.core.state import JobState
from tony_py.auth import Signer, UnsignedAnswer, Verifier, call_json
from tony_py.executor.channel import AmChannel
from tony_py.executor.heartbeats import Heartbeats
from tony_py.executor.lease import Lease
from tony_py.job.records import TaskState
import tony_py.task

LEASE = 10.0
SECRET = "ab" * 32


def advance(h: Harness, seconds: float, attempt: int | None = None, step: float = 0.5) -> None:
    """The AM's clock runs on, ticking as the AM does (in steps: a longer gap reads as a stall);
    with `attempt`, every executor of it heartbeats meanwhile."""
    end = h.clock.now + seconds
    while h.clock.now < end:
        h.clock.now = min(end, h.clock.now + step)
        if attempt is not None:
            beat_all(h, attempt)
        h.c.tick()


def beat_all(h: Harness, attempt: int = 0, but: str | None = None) -> None:
    for name, task in h.c.tasks.items():
        if name != but and task.container is not None:
            h.heartbeat(name, attempt, task.container.id, {})


# ---- the book --------------------------------------------------------------------------------------
def test_a_fence_holds_until_the_lease_and_margin_ran_out_or_the_nodemanager_saw_the_end():
    fences = Fences(LEASE)
    fences.fence("worker:0", "c1", last_heard=100.0, why="lost")
    assert [f.copy for f in fences.holding(["worker:0"], 100.0 + LEASE + MARGIN_S - 0.01)] == ["c1"]
    assert fences.holding(["worker:1"], 105.0) == []  # another task's fence holds nobody else
    fences.heard_from("c1", 120.0)  # the copy called again (it was told it is superseded)
    assert fences.holding(["worker:0"], 120.0 + LEASE) != []
    assert not fences.ended("c1", -100)  # "aborted" for a lost node: the process may well run
    assert fences.ended("c1", -105)  # its NodeManager killed it
    assert fences.holding(["worker:0"], 121.0) == []
    fences.fence("worker:0", "c2", last_heard=200.0, why="lost")
    assert fences.holding(["worker:0"], 200.0 + LEASE + MARGIN_S) == []  # ran out: dropped


# ---- the AM: a lost copy's replacement waits for its lease --------------------------------------------
def lose(h: Harness, name: str) -> None:
    """Everyone but `name` keeps heartbeating until the AM declares it lost and restarts."""
    while h.c.attempt == 0:
        h.clock.now += 0.5
        beat_all(h, but=name)
        h.c.tick()


def rejoin(h: Harness, name: str) -> str:
    """The restarted gang registers: kept executors again, the lost task in a new container."""
    new = h.allocate("worker")
    h.c.on_started(new)
    for i, (task_name, task) in enumerate(h.c.tasks.items()):
        assert h.register(task_name, 1, task.container.id, 3000 + i, None)["ok"]
    return new


def test_a_lost_copys_replacement_gets_its_spec_only_after_the_lease_ran_out(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    old = h.containers["worker:1"]
    lost_at = h.clock.now
    lose(h, "worker:1")
    assert h.cluster.stopped == [old] and h.c.state == JobState.RESTARTING
    new = rejoin(h, "worker:1")
    assert h.wait_spec("worker:1", 1, new, 0) is None  # the gang is complete, but fenced
    assert any("may still run" in e["message"] for e in h.c.events.recent)
    while h.clock.now < lost_at + LEASE + MARGIN_S - 0.5:
        advance(h, 0.5, attempt=1)
        assert h.c.state == JobState.RESTARTING, h.clock.now - lost_at
    advance(h, 1.0, attempt=1)
    assert h.c.state == JobState.RUNNING and h.c.restarts_used == 1
    assert "env" in h.wait_spec("worker:1", 1, new, 0)


def test_the_nodemanager_seeing_the_old_copy_end_lifts_its_fence_at_once(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    old = h.containers["worker:1"]
    lose(h, "worker:1")
    rejoin(h, "worker:1")
    h.c.on_completed(old, -100, "node lost")  # the RM's word for a lost node: proves nothing
    assert h.c.state == JobState.RESTARTING
    h.c.on_completed(old, -105, "killed by the AM")  # its NodeManager killed it: gone
    assert h.c.state == JobState.RUNNING


def test_a_healed_copy_is_told_it_is_superseded_and_its_fence_runs_on(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    old = h.containers["worker:1"]
    lose(h, "worker:1")
    rejoin(h, "worker:1")
    advance(h, 4.0, attempt=1)
    answer = h.heartbeat("worker:1", 0, old, {})  # the partition healed before the fence ran out
    assert answer["action"] == "exit" and "superseded" in answer["reason"]
    advance(h, LEASE + MARGIN_S - 0.5, attempt=1)
    assert h.c.state == JobState.RESTARTING  # it may run until its lease, counted from that answer
    advance(h, 1.0, attempt=1)
    assert h.c.state == JobState.RUNNING


def test_a_kept_copy_that_goes_silent_is_replaced_without_another_restart(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=3", "tony.am.retry-count=1")
    h.bring_up()
    h.result("worker:0", code=None, signal="SIGKILL")  # a restart: the others are kept in place
    assert h.c.restarts_used == 1 and h.c.tasks["worker:2"].kept
    for _ in range(14):  # worker:2 never comes back for the restart (its node went away meanwhile)
        h.clock.now += 0.5
        for name in ("worker:0", "worker:1"):
            h.heartbeat(name, 1, h.containers[name], {})
        h.c.tick()
    task = h.c.tasks["worker:2"]
    assert task.state == TaskState.PENDING and h.containers["worker:2"] in h.cluster.stopped
    assert h.c.restarts_used == 1 and h.c.decision is None


def test_a_restart_keeps_only_executors_heard_from_lately(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=3", "tony.am.retry-count=1")
    h.bring_up()
    h.clock.now += 2.5
    beat_all(h, but="worker:2")  # worker:2 has been quiet for two and a half intervals
    h.result("worker:0", code=None, signal="SIGKILL")
    assert h.c.tasks["worker:1"].kept and not h.c.tasks["worker:2"].kept
    assert h.containers["worker:2"] in h.cluster.stopped


def test_a_fenced_result_is_a_lost_executor(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    h.report_result("worker:1", 0, h.containers["worker:1"], None, "SIGKILL", fenced=True)
    failure = h.c.failures[0]
    assert failure.kind.value == "lost" and "fenced" in failure.message and "lease-sec=10" in failure.message
    assert h.c.restarts_used == 1


def test_a_new_am_attempt_starts_no_new_copy_until_a_lease_after_it_started(tmp_path):
    """The earlier attempt may have started copies that neither its snapshot nor YARN shows yet."""
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    for name in h.containers:
        h.c.tasks[name].control_url = f"http://{name}"
    snap = AmSnapshot.from_dict(json.loads(json.dumps(h.c.snapshot().to_dict())))
    fresh = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1", start=False)
    started = fresh.clock.now
    fresh.c.adopt(snap, [{"id": h.containers["worker:0"]}])  # worker:1's container is gone: restart
    fresh.containers = dict(h.containers)
    new = fresh.allocate("worker")
    fresh.c.on_started(new)
    fresh.register("worker:0", 1, h.containers["worker:0"], 3000, None)
    fresh.register("worker:1", 1, new, 3001, None)
    assert fresh.c.state == JobState.RESTARTING
    advance(fresh, LEASE + MARGIN_S + 0.5, attempt=1)
    assert fresh.c.state == JobState.RUNNING and fresh.clock.now - started >= LEASE + MARGIN_S


# ---- the executor: lease, heartbeats, fence ----------------------------------------------------------
def test_the_lease_counts_from_when_the_answered_request_was_sent(tmp_path):
    lease = Lease(2.0)
    lease.renewed_at = 0.0
    sent = time.monotonic()
    lease.renew(sent - 1.5)  # an answer that took 1.5 s to come back
    assert lease.ends_at() == pytest.approx(sent + 0.5)
    lease.renew(sent - 5)  # an older answer never moves it back
    assert lease.ends_at() == pytest.approx(sent + 0.5)
    path = tmp_path / "lease"
    lease.publish(path)
    assert float(path.read_text()) == pytest.approx(sent + 0.5)


def test_a_task_holds_its_lease_only_while_the_file_says_so(tmp_path, monkeypatch):
    path = tmp_path / "tony-lease-0"
    monkeypatch.setenv("TONY_LEASE_FILE", str(path))
    assert not tony_py.task.holds_lease()  # no file: no lease
    path.write_text(repr(time.monotonic() + 3600))
    assert tony_py.task.holds_lease()
    path.write_text(repr(time.monotonic() - 0.01))  # a node thawed after its lease ran out
    assert not tony_py.task.holds_lease()
    monkeypatch.delenv("TONY_LEASE_FILE")
    assert tony_py.task.holds_lease()  # outside TonY-py


@pytest.fixture
def am(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1")
    h.bring_up()
    srv = AmHttpServer(("127.0.0.1", 0), h.c, Verifier(SECRET), lambda trusted: {}, max_connections=16)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.h, srv.url = h, f"http://127.0.0.1:{srv.port}"
    yield srv
    srv.shutdown()
    srv.server_close()


def beats(channel: AmChannel, am, fenced: threading.Event, interval: float = 0.1,
          fired: list | None = None) -> Heartbeats:
    """Heartbeats of worker:0 to the AM; the fence sets `fenced` (and notes when, in `fired`)."""
    container = am.h.containers["worker:0"]
    body = {"task": "worker:0", "attempt": 0, "container": container}

    def fence():
        if fired is not None:
            fired.append(time.monotonic())
        fenced.set()

    return Heartbeats(channel, SECRET, container, interval, body=lambda: dict(body), fence=fence)


def test_heartbeats_renew_the_lease_and_bring_the_ams_instruction(am):
    lease = Lease(2.0)
    channel = AmChannel(am.url, Signer(SECRET, "exec"), give_up_after_s=5, lease=lease)
    fenced = threading.Event()
    first_end = lease.ends_at()
    hb = beats(channel, am, fenced, interval=0.2).start()
    try:
        # past the lease it started with: only heartbeats answered meanwhile can have kept it
        assert wait_until(lambda: time.monotonic() > first_end + 0.2)
        assert lease.ends_at() > first_end and not fenced.is_set()
        am.h.c.kill("stop")  # the job ends: the next answer says exit
        assert wait_until(lambda: hb.instruction is not None)
        assert hb.instruction["action"] == "exit"
    finally:
        hb.stop()


def test_when_no_am_answers_the_task_is_fenced_when_its_lease_ends(am):
    """Never before the lease ends, and within the margin the AM waits past the lease before a
    replacement may start (fencing.MARGIN_S): that margin is what keeps the two copies apart."""
    lease = Lease(0.8)
    channel = AmChannel(am.url, Signer(SECRET, "exec"), give_up_after_s=5, lease=lease)
    am.h.c.lose_rm("the ResourceManager is gone")  # the AM stops answering executors
    fenced, fired = threading.Event(), []
    renewed_at, ends_at = lease.renewed_at, lease.ends_at()
    hb = beats(channel, am, fenced, fired=fired).start()
    try:
        assert fenced.wait(30)
        assert lease.renewed_at == renewed_at  # the AM's refusals renewed nothing
        assert ends_at <= fired[0] < ends_at + MARGIN_S, fired[0] - ends_at
    finally:
        hb.stop()
    with pytest.raises(UnsignedAnswer) as refused:  # an unsigned refusal: it renews nothing
        call_json(Signer(SECRET, "other"), am.url, "POST", "/v1/heartbeat",
                  {"task": "worker:0", "attempt": 0, "container": am.h.containers["worker:0"]}, 5)
    assert refused.value.status == 503


def test_a_heartbeat_stuck_on_one_lane_does_not_hold_back_the_next(am, monkeypatch):
    """A lossy link: one request waits in TCP's retransmission backoff; the others renew the
    lease meanwhile, and it outlives its first end while that one is still stuck."""
    lease = Lease(2.0)
    channel = AmChannel(am.url, Signer(SECRET, "exec"), give_up_after_s=5, lease=lease)
    import tony_py.executor.heartbeats as heartbeats

    real = heartbeats.call_json
    stuck, release = threading.Event(), threading.Event()

    def first_one_hangs(signer, *args, **kwargs):
        if not stuck.is_set():
            stuck.set()
            release.wait(60)  # never answered while the test looks
        return real(signer, *args, **kwargs)

    monkeypatch.setattr(heartbeats, "call_json", first_one_hangs)
    fenced = threading.Event()
    first_end = lease.ends_at()
    hb = beats(channel, am, fenced, interval=0.2).start()
    try:
        assert wait_until(lambda: stuck.is_set() and lease.ends_at() > first_end)  # another lane got through
        assert wait_until(lambda: time.monotonic() > first_end + 0.2)
        assert not release.is_set() and not fenced.is_set()
    finally:
        release.set()
        hb.stop()
