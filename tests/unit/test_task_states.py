"""The task state machine (tony_py/am/core/tasks.py): every transition in its table is taken and
every other one refused, an end state is never left, every state is reachable from PENDING and
is reached by the coordinator itself; the copy's sub-state only moves forward; and nothing but
the task writes its state, nothing but Recovery the job's attempt, restart counters and view."""

from __future__ import annotations

import ast
from itertools import product
from pathlib import Path

import pytest

from harness import Harness
from tony_py.am.core.tasks import TRANSITIONS, Copy, Ending, IllegalTransition, Task
from tony_py.config.spec import TaskId
from tony_py.job.records import TaskState

pytestmark = pytest.mark.unit

AM = Path(__file__).resolve().parents[2] / "tony_py" / "am"


def task_in(state: TaskState) -> Task:
    task = Task(TaskId("worker", 0), tracked=True)
    task.restore(0, state, Copy.NONE, False, "the test's start")
    return task


# The lifecycle as designed, spelled out here on purpose: a change to tasks.py's TRANSITIONS must
# be made twice (there and here), so no edit of the table passes its own test unseen.
ENDS = {"SUCCEEDED", "FAILED", "PREEMPTED", "STOPPED"}
DESIGNED = {
    "PENDING": {"ALLOCATED", "PARKED", "STOPPED"},
    "ALLOCATED": {"LAUNCHED", "REGISTERED", "RUNNING"} | ENDS,  # may skip forward: the AM's view lags
    "LAUNCHED": {"REGISTERED", "RUNNING"} | ENDS,
    "REGISTERED": {"REGISTERED", "RUNNING"} | ENDS,  # a re-registration of the same copy
    "RUNNING": {"RUNNING"} | ENDS,
    "SUCCEEDED": set(), "FAILED": set(), "PREEMPTED": set(), "STOPPED": set(), "PARKED": set(),
}


def test_the_table_is_the_designed_lifecycle():
    assert {s.name for s in TaskState} == set(DESIGNED)
    assert {before.name: {after.name for after in afters} for before, afters in TRANSITIONS.items()} == DESIGNED


@pytest.mark.parametrize("before,after", list(product(TaskState, TaskState)),
                         ids=lambda s: s.value)
def test_every_pair_is_taken_or_refused_as_designed(before, after):
    task = task_in(before)
    if after.name in DESIGNED[before.name]:
        task.enter(after, "allowed")
        assert task.state == after and task.why == "allowed"
    else:
        with pytest.raises(IllegalTransition, match=f"{before.value} .*-> {after.value}"):
            task.enter(after, "refused")
        assert task.state == before


def test_the_table_covers_every_state_and_end_states_are_final():
    assert set(TRANSITIONS) == set(TaskState)
    for state in TaskState:
        assert state.finished == (not TRANSITIONS[state]), state
    reached, frontier = {TaskState.PENDING}, [TaskState.PENDING]
    while frontier:
        for after in TRANSITIONS[frontier.pop()]:
            if after not in reached:
                reached.add(after)
                frontier.append(after)
    assert reached == set(TaskState)


def test_only_a_new_copy_or_a_snapshot_leaves_an_end_state():
    task = task_in(TaskState.FAILED)
    task.start_over(1, keep_container=False, why="gang restart to attempt 1")
    assert (task.state, task.attempt, task.copy, task.why) == (TaskState.PENDING, 1, Copy.NONE,
                                                               "gang restart to attempt 1")
    with pytest.raises(IllegalTransition, match="restored from a snapshot after it had moved"):
        task.restore(1, TaskState.RUNNING, Copy.SERVED, False, "too late")


def test_the_copy_only_moves_forward_and_the_first_ending_stands():
    task = Task(TaskId("worker", 0), tracked=True)
    task.container = object()
    task.reached(Copy.GRANTED)
    assert not task.container_started
    task.reached(Copy.REGISTERED)
    task.reached(Copy.STARTED)  # the NodeManager's word, after the executor registered
    assert task.copy == Copy.REGISTERED and task.container_started and not task.may_run
    task.reached(Copy.SERVED)
    assert task.may_run
    task.end_copy(Ending.STOPPING)
    task.end_copy(Ending.RELEASED)
    assert task.stopping and not task.released
    task.reached(Copy.ENDED)
    assert not task.may_run
    task.container = object()
    task.start_over(1, keep_container=True, why="kept")
    assert task.kept and task.state == TaskState.LAUNCHED and task.ending == Ending.NONE


@pytest.fixture
def moves(monkeypatch):
    """Every (before, after) the coordinator makes a task take, recorded."""
    seen: set[tuple[TaskState, TaskState]] = set()
    enter = Task.enter

    def recording(self, state, why):
        before = self.state
        enter(self, state, why)
        seen.add((before, state))

    monkeypatch.setattr(Task, "enter", recording)
    return seen


def test_the_coordinator_reaches_every_state(tmp_path, moves):
    # success, a failure, the rest stopped with the verdict
    h = Harness(tmp_path / "a", "tony.worker.instances=2", "tony.ps.instances=1")
    h.bring_up()
    h.result("worker:0", 0)
    h.result("worker:1", 2)
    h.complete("ps:0", -105)
    # preempted; a registration before the NodeManager's "started"
    h = Harness(tmp_path / "b", "tony.worker.instances=2")
    h.bring_up()
    h.c.on_preemption([h.containers["worker:1"]], 5000)
    h.report_result("worker:1", 0, h.containers["worker:1"], 0, None, preempted=True)
    assert h.register("worker:1", 1, h.allocate("worker"), 2100, None)["ok"]
    # a task still pending at the verdict
    h = Harness(tmp_path / "d", "tony.worker.instances=2")
    h.allocate("worker")
    h.c.fail_job("stopped by the test")
    # parked: a smaller gang goes on without it
    h = Harness(tmp_path / "c", "tony.worker.instances=3", "tony.worker.min-instances=2",
                "tony.container.allocation.timeout=5000", "tony.application.framework=pytorch")
    h.allocate("worker")
    h.allocate("worker")
    h.clock.now += 6
    h.c.tick()
    # a later AM attempt adopts a copy kept by a gang restart before its executor came back
    # (LAUNCHED in the snapshot); the executor had registered, run and finished meanwhile
    h = Harness(tmp_path / "e", "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    assert h.result("worker:1", code=None, signal="SIGKILL") == {"action": "restart", "attempt": 1}
    fresh = h.next_attempt()
    assert fresh.c.tasks["worker:0"].state == TaskState.LAUNCHED
    assert fresh.report_result("worker:0", 1, h.containers["worker:0"], 0, None) == {"action": "exit"}
    assert fresh.c.tasks["worker:0"].state == TaskState.SUCCEEDED
    reached = {after for _, after in moves}
    assert reached == set(TaskState) - {TaskState.PENDING}
    assert {(TaskState.ALLOCATED, TaskState.REGISTERED), (TaskState.PENDING, TaskState.STOPPED),
            (TaskState.LAUNCHED, TaskState.SUCCEEDED)} <= moves


WRITERS = {  # attribute -> the modules of tony_py/am that may assign it (through any receiver)
    "state": {"core/state.py"},  # the job's (JobCore.enter); a task's is _state, in core/tasks.py
    "_state": {"core/tasks.py"}, "_copy": {"core/tasks.py"}, "_ending": {"core/tasks.py"},
    "attempt": {"core/tasks.py", "core/state.py", "core/recovery.py"},
    "restarts_used": {"core/state.py", "core/recovery.py"},
    "infra_restarts_used": {"core/state.py", "core/recovery.py"},
    "cluster_view": {"core/state.py", "core/recovery.py"},
}


def test_only_their_owners_write_states_attempts_counters_and_the_view():
    found: dict[str, set[str]] = {name: set() for name in WRITERS}
    for path in AM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else \
                [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                for part in ast.walk(target):
                    if isinstance(part, ast.Attribute) and part.attr in WRITERS:
                        found[part.attr].add(str(path.relative_to(AM)))
    # a scan that found no writer would pass whatever the code did: each owner must be seen writing
    assert found == WRITERS, {name: {"unexpected": sorted(found[name] - owners),
                                     "not seen": sorted(owners - found[name])}
                              for name, owners in WRITERS.items() if found[name] != owners}
