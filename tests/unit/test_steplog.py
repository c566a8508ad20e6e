"""The fault tests' judge (tests/integration/jobs/stepper.py): it must see two live copies of a
task writing, and must not see one where copies took turns."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration" / "jobs"))

from stepper import late_landings, resume, split_brain, writers  # noqa: E402


def step(task, container, pid, n, t, host="nm1", checked=None):
    out = {"task": task, "container": container, "pid": pid, "host": host, "attempt": 0, "step": n, "t": t}
    if checked is not None:
        out["checked"] = checked  # when its lease was checked (before the write it allowed)
    return out


def test_copies_that_took_turns_are_no_split_brain():
    steps = [step("worker:0", "c1", 10, n, n) for n in range(1, 6)]
    steps += [step("worker:0", "c2", 20, n, 10 + n, host="nm2") for n in range(5, 9)]  # one step redone
    steps += [step("worker:1", "c3", 30, n, n) for n in range(1, 9)]
    assert split_brain(steps) == []
    ws = writers(steps)
    assert [w.container for w in ws["worker:0"]] == ["c1", "c2"] and ws["worker:0"][1].first_step == 5


def test_a_stale_copy_writing_after_its_replacement_started_is_split_brain():
    steps = [step("worker:0", "c1", 10, n, n) for n in range(1, 6)]
    steps += [step("worker:0", "c2", 20, n, n - 0.5) for n in range(4, 8)]  # started at 3.5; c1 wrote until 5
    found = split_brain(steps)
    assert len(found) == 1 and "c1" in found[0] and "c2" in found[0]


def test_one_late_step_after_a_thaw_is_enough():
    steps = [step("worker:0", "c1", 10, n, n) for n in range(1, 4)]
    steps += [step("worker:0", "c2", 20, n, 10 + n) for n in range(4, 7)]
    steps.append(step("worker:0", "c1", 10, 4, 20.0, checked=19.9))  # the frozen copy, thawed, decided once more
    assert len(split_brain(steps)) == 1 and late_landings(steps) == []


def test_a_write_decided_before_the_freeze_that_lands_after_the_thaw_is_a_late_landing_not_split_brain():
    """Frozen between its lease check and its write: the write lands at the thaw, after the
    replacement started. No lease stops a write past its check; the judge tells it apart from a
    copy that decided to write while the other ran, and the fault tests count it separately."""
    steps = [step("worker:0", "c1", 10, n, n, checked=n - 0.01) for n in range(1, 4)]
    steps += [step("worker:0", "c2", 20, n, 10 + n, host="nm2") for n in range(4, 7)]
    steps.append(step("worker:0", "c1", 10, 4, 20.0, checked=3.99))  # checked at 3.99, frozen, landed at 20
    assert split_brain(steps) == []
    [landed] = late_landings(steps)
    assert "step 4 landed 6.00 s after" in landed and "decided 10.01 s before" in landed


def test_the_checkpoint_of_the_highest_attempt_is_the_one_resumed(tmp_path):
    """The checkpoint is fenced by the gang attempt: a late write of an older copy lands in its
    own file and never replaces a newer copy's."""
    for attempt, step_n in ((0, 9), (2, 4), (1, 7)):  # attempt 0's late write came last
        (tmp_path / f"worker:0.{attempt}.json").write_text(f'{{"step": {step_n}}}')
    (tmp_path / "worker:1.0.json").write_text('{"step": 99}')
    assert resume(str(tmp_path), "worker:0") == 4 and resume(str(tmp_path), "worker:2") == 0


def test_the_same_container_restarted_in_place_is_a_new_writer():
    steps = [step("worker:0", "c1", 10, n, n) for n in range(1, 4)]
    steps += [step("worker:0", "c1", 11, n, 5 + n) for n in range(3, 6)]  # a new pid: the next attempt
    assert split_brain(steps) == [] and len(writers(steps)["worker:0"]) == 2
