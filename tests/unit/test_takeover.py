"""AM fail-over from a late snapshot: the earlier AM attempt writes its snapshot at most twice a
second, after the fact, so the next attempt may take over from one that misses the last things
the earlier attempt did (registrations, a served spec, a granted container). Whatever it missed,
the gang completes within the registration wait (and no sooner than the take-over's fence on
the earlier attempt's copies allows), and no restart is spent for it.

The story of the tests built on _old_am_after_the_restart: three workers ran at attempt 0;
worker:0's executor froze; the gang restarted to attempt 1 (the user's budget: one restart),
keeping worker:1 and worker:2 in place, and YARN granted worker:0's replacement. Then the AM
wrote its last snapshot, and died after doing some more."""

import json

import pytest

from harness import Harness, served_cluster
from tony_py.am.core.failover import AmSnapshot
from tony_py.am.core.fencing import MARGIN_S
from tony_py.am.core.state import JobState
from tony_py.job.records import TaskState

pytestmark = pytest.mark.unit

CONF = ("tony.worker.instances=3", "tony.am.retry-count=5")
KEPT = ("worker:1", "worker:2")


def _old_am_after_the_restart(tmp_path):
    """The earlier AM attempt just after it granted worker:0's replacement: (harness, its container)."""
    h = Harness(tmp_path, *CONF)
    h.bring_up()
    for name in h.containers:  # (their executors' control endpoints: a later AM attempt can re-adopt them)
        h.c.tasks[name].control_url = f"http://{name}"
    for _ in range(12):  # worker:0's executor freezes; the others heartbeat on
        h.clock.now += 0.5
        for name in KEPT:
            h.heartbeat(name, 0, h.containers[name])
        h.c.tick()
    assert h.c.attempt == 1 and (h.c.restarts_used, h.c.infra_restarts_used) == (1, 0)
    assert all(h.c.tasks[name].kept for name in KEPT)
    h.c.on_completed(h.containers["worker:0"], -105, "")  # the frozen copy's container, stopped: its fence lifts
    return h, h.allocate("worker")


def _last_snapshot(h) -> AmSnapshot:
    return AmSnapshot.from_dict(json.loads(json.dumps(h.c.snapshot().to_dict())))  # through JSON, as on HDFS


def _take_over(tmp_path, h, snap, live):
    """The next AM attempt, from `snap`, with the containers YARN kept (`live`), started."""
    fresh = Harness(tmp_path, *h.overrides, start=False)
    fresh.n = h.n  # (YARN never grants a container id twice)
    fresh.c.adopt(snap, [{"id": cid} for cid in live])
    fresh.c.start()
    return fresh


class Executor:
    """What an executor does with the AM's answers (tony_py/executor/supervisor.py): it long-polls
    for its spec; once served it starts its process and heartbeats; `restart` makes it kill the
    process and register again (fresh ports) at the attempt it names; `exit` ends it."""

    def __init__(self, am, name, container, attempt, port, phase):
        self.am, self.name, self.container, self.attempt, self.port = am, name, container, attempt, port
        self.phase, self.served, self.restarts = phase, None, 0

    def register(self):
        self.port += 1
        self.obey(self.am.register(self.name, self.attempt, self.container, self.port))
        if self.phase != "done":
            self.phase = "polling"

    def step(self):
        if self.phase == "polling":
            self.obey(self.am.wait_spec(self.name, self.attempt, self.container, 0))
        elif self.phase == "running":
            self.obey(self.am.heartbeat(self.name, self.attempt, self.container))

    def finish(self, exit_code=0):
        """Its process ended: it reports the result and does as it is answered."""
        self.phase = "ended"
        self.obey(self.am.report_result(self.name, self.attempt, self.container, exit_code, None))

    def obey(self, answer):
        answer = answer or {}
        if answer.get("action") == "restart":
            self.restarts += 1
            self.attempt = answer["attempt"]
            self.register()
        elif answer.get("action") == "exit":
            self.phase = "done"
        elif "env" in answer:
            self.served, self.phase = answer, "running"
            self.obey(self.am.task_started(self.name, self.attempt, self.container, 100))


def _until_served(fresh, executors, limit_s):
    """Every executor's calls and the AM's ticks, twice a second, until each of them runs a spec
    this AM attempt served or `limit_s` passed. Returns the seconds it took (None: never)."""
    start = fresh.clock.now
    while fresh.clock.now - start < limit_s:
        fresh.clock.now += 0.5
        for executor in executors:
            executor.step()
        fresh.c.tick()
        if all(e.phase == "running" for e in executors):
            return fresh.clock.now - start
    return None


@pytest.mark.parametrize("kept_were", ["polling", "served"])
def test_the_gang_completes_within_the_registration_wait_after_a_take_over_from_a_late_snapshot(tmp_path, kept_were):
    """The kept executors registered for attempt 1 with the earlier AM after its last snapshot,
    which shows them launched, not registered: they are past registration (they long-poll for
    their spec, or, served by it, run and heartbeat) and would never register again. The new
    attempt tells each, on its first call, to register again at the same attempt: the gang of
    attempt 1 completes as soon as the new AM's fence on the earlier attempt's copies lifts, far
    within the registration wait, with the addresses they registered with at this attempt, and
    no restart is spent."""
    h, replacement = _old_am_after_the_restart(tmp_path)
    snap = _last_snapshot(h)
    for i, name in enumerate(KEPT):  # they register with the earlier AM; its next snapshot never comes
        assert h.register(name, 1, h.containers[name], 3000 + i) == {"ok": True, "attempt": 1}
    if kept_were == "served":  # ... and so did the replacement: the earlier AM served them all
        h.c.on_started(replacement)
        assert h.register("worker:0", 1, replacement, 3002)["ok"]
        for name, cid in [*((n, h.containers[n]) for n in KEPT), ("worker:0", replacement)]:
            assert "env" in h.wait_spec(name, 1, cid, 0)
            assert h.task_started(name, 1, cid, 100) == {"ok": True}
    fresh = _take_over(tmp_path, h, snap, [*(h.containers[name] for name in KEPT), replacement])
    assert [fresh.c.tasks[name].state for name in KEPT] == [TaskState.LAUNCHED] * 2
    assert fresh.cluster.stopped == [replacement]  # never registered, as far as the snapshot knows
    phase = "running" if kept_were == "served" else "polling"
    executors = [Executor(fresh, name, h.containers[name], 1, 3000 + i, phase) for i, name in enumerate(KEPT)]
    new0 = fresh.allocate("worker")
    fresh.c.on_started(new0)
    worker0 = Executor(fresh, "worker:0", new0, 1, 4000, "new")
    worker0.register()

    wait_s = fresh.spec.registration_timeout_ms / 1000
    took = _until_served(fresh, [worker0, *executors], wait_s)
    assert took is not None and fresh.spec.lease_s + MARGIN_S <= took < fresh.spec.lease_s + 5 < wait_s, took
    assert [e.restarts for e in executors] == [1, 1] and worker0.restarts == 0
    assert fresh.c.state == JobState.RUNNING and fresh.c.attempt == 1
    assert (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (1, 0) and fresh.c.failures == snap.failures
    addresses = [fresh.c.tasks[name].address for name in ("worker:0", *KEPT)]
    assert [a.rsplit(":", 1)[1] for a in addresses] == ["4001", "3001", "3002"]  # as they registered with this AM
    assert all(served_cluster(e.served) == {"worker": addresses} for e in (worker0, *executors))


@pytest.mark.parametrize("they_were", ["polling", "served"])
def test_the_gang_completes_within_the_registration_wait_when_its_restart_came_after_the_last_snapshot(tmp_path,
                                                                                                     they_were):
    """The earlier AM attempt's last snapshot shows attempt 0 running; then worker:1 died, the
    gang restarted in place to attempt 1, both executors registered for it (and were served),
    and the AM died. The new attempt catches up with attempt 1 on the first call (no restart
    spent again); the copies it keeps for it are past a registration it never saw, and register
    again: the gang of attempt 1 completes within the registration wait."""
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2")
    h.bring_up()
    for task in h.c.tasks.values():
        task.control_url = "http://executor"
    snap = _last_snapshot(h)
    assert h.result("worker:1", code=None, signal="SIGKILL") == {"action": "restart", "attempt": 1}
    for name, cid in h.containers.items():
        assert h.register(name, 1, cid, 3000)["ok"]
    if they_were == "served":
        for name, cid in h.containers.items():
            assert "env" in h.wait_spec(name, 1, cid, 0) and h.task_started(name, 1, cid, 100) == {"ok": True}
    fresh = _take_over(tmp_path, h, snap, h.containers.values())
    executors = [Executor(fresh, name, cid, 1, 5000, "running" if they_were == "served" else "polling")
                 for name, cid in h.containers.items()]
    took = _until_served(fresh, executors, fresh.spec.registration_timeout_ms / 1000)
    assert took is not None and took < fresh.spec.lease_s + 5, took
    assert [e.restarts for e in executors] == [1, 1] and fresh.c.attempt == 1 and fresh.c.restarts_used == 0
    assert all(served_cluster(e.served) == {"worker": [fresh.c.tasks[n].address for n in h.containers]}
               for e in executors)


def test_fcfs_copies_registered_unseen_register_again_and_run_at_no_cost(tmp_path):
    """FCFS: each task is served what has registered so far, at once. A kept copy that the
    earlier AM attempt registered and served after its last snapshot runs with an address this
    attempt does not know (a later task's view would leave it out); told to register again at
    the same attempt, it is served again as soon as the fence on the earlier attempt's copies
    lifts, and no restart is spent."""
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2", "tony.application.distributed-mode=FCFS")
    h.bring_up()
    for task in h.c.tasks.values():
        task.control_url = "http://executor"
    assert h.result("worker:1", code=None, signal="SIGKILL") == {"action": "restart", "attempt": 1}
    snap = _last_snapshot(h)
    for name, cid in h.containers.items():  # the earlier AM registered and served them, then died
        assert h.register(name, 1, cid, 3000)["ok"] and "env" in h.wait_spec(name, 1, cid, 0)
    fresh = _take_over(tmp_path, h, snap, h.containers.values())
    executors = [Executor(fresh, name, cid, 1, 5000, "running") for name, cid in h.containers.items()]
    took = _until_served(fresh, executors, fresh.spec.registration_timeout_ms / 1000)
    assert took is not None and took < fresh.spec.lease_s + 5, took
    assert [e.restarts for e in executors] == [1, 1] and fresh.c.attempt == 1
    assert (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (1, 0)
    assert all(e.served["env"]["TONY_RESTART_ATTEMPT"] == "1" for e in executors)


@pytest.mark.parametrize("yarn_kept_it", [True, False], ids=["kept", "ended-with-the-attempt"])
def test_no_budget_is_spent_for_a_container_that_never_registered(tmp_path, yarn_kept_it):
    """worker:0's replacement was granted and launched, and the AM died before its executor
    registered. YARN keeps a container across attempts only if the RM has seen it running; if
    not, it ends it with the attempt. Either way nothing ran in it: the new attempt replaces it
    (asks for a container again, at the same attempt) and spends no restart, from neither budget."""
    h, replacement = _old_am_after_the_restart(tmp_path)
    snap = _last_snapshot(h)
    live = [*(h.containers[name] for name in KEPT), *([replacement] if yarn_kept_it else [])]
    fresh = _take_over(tmp_path, h, snap, live)
    assert fresh.c.attempt == 1 and (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (1, 0)
    assert fresh.c.failures == snap.failures and fresh.c.decision is None
    assert fresh.c.tasks["worker:0"].state == TaskState.PENDING and fresh.cluster.requests == [("worker", 1)]
    assert all(fresh.c.tasks[name].state == TaskState.LAUNCHED for name in KEPT)  # kept, still at attempt 1
    assert fresh.cluster.stopped == ([replacement] if yarn_kept_it else [])


def test_a_success_that_a_copy_restored_as_launched_reports_first_is_accepted(tmp_path):
    """The open case: the earlier AM served attempt 1 after its last snapshot (which shows the
    kept copies launched, not registered), the tasks ran to exit 0 while no AM answered, and each
    executor's first call to the new attempt is its result. The new attempt never saw the gang
    view they ran with, but their runs are over: a process that exited 0 succeeded (TonY's rule:
    exit 0 is SUCCEEDED, and once every tracked task finished the job did), whatever view it had.
    Each is accepted and told to exit; nothing runs again and no restart is spent. (Told to
    register again instead, every task of a job that had finished would run once more.)"""
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2")
    h.bring_up()
    h.c.tasks["worker:0"].control_url = h.c.tasks["worker:1"].control_url = "http://executor"
    assert h.result("worker:1", code=None, signal="SIGKILL") == {"action": "restart", "attempt": 1}
    snap = _last_snapshot(h)  # both kept in place, launched at attempt 1
    for name, cid in h.containers.items():  # then the earlier AM served attempt 1 and died
        assert h.register(name, 1, cid, 3000)["ok"]
    for name, cid in h.containers.items():
        assert "env" in h.wait_spec(name, 1, cid, 0)
    fresh = _take_over(tmp_path, h, snap, h.containers.values())
    assert [t.state for t in fresh.c.tasks.values()] == [TaskState.LAUNCHED] * 2
    assert fresh.report_result("worker:1", 1, h.containers["worker:1"], 0, None) == {"action": "exit"}
    assert fresh.c.tasks["worker:1"].state == TaskState.SUCCEEDED and fresh.c.decision is None
    assert fresh.report_result("worker:0", 1, h.containers["worker:0"], 0, None)["action"] == "exit"
    assert fresh.c.final_status == "SUCCEEDED" and fresh.c.attempt == 1
    assert (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (1, 0)


@pytest.mark.parametrize("first", ["result", "heartbeats"])
@pytest.mark.parametrize("succeeded", ["worker:2", "worker:0"], ids=["a-worker", "the-chief"])
def test_a_gang_that_cannot_reform_around_a_success_starts_again_at_no_cost_or_has_succeeded(tmp_path, succeeded,
                                                                                             first):
    """As above, but only one task's run ended (exit 0) while no AM answered; the others ran on
    and reached the new attempt with heartbeats, so they were told to register again at attempt
    1. The succeeded one never registers again, and no gang forms around a run that is over,
    whichever of them the new attempt heard first: once the others are back, the gang starts
    again with all of them at no cost (attempt 2, every worker served within the registration
    wait), or, if the one that succeeded was the chief, the job has succeeded (TonY's rule) and
    nothing waits for a spec that can never come."""
    h = Harness(tmp_path, "tony.worker.instances=3", "tony.am.retry-count=2")
    h.bring_up()
    for task in h.c.tasks.values():
        task.control_url = "http://executor"
    assert h.result("worker:2", code=None, signal="SIGKILL") == {"action": "restart", "attempt": 1}
    snap = _last_snapshot(h)  # all three kept in place, launched at attempt 1
    for name, cid in h.containers.items():  # then the earlier AM served attempt 1 and died
        assert h.register(name, 1, cid, 3000)["ok"]
    for name, cid in h.containers.items():
        assert "env" in h.wait_spec(name, 1, cid, 0)
    fresh = _take_over(tmp_path, h, snap, h.containers.values())
    executors = {name: Executor(fresh, name, cid, 1, 5000, "running") for name, cid in h.containers.items()}
    if first == "result":
        executors[succeeded].finish()
    for executor in executors.values():
        executor.step()
    if first == "heartbeats":
        executors[succeeded].finish()
    assert (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (1, 0)
    if succeeded == "worker:0":
        assert fresh.c.final_status == "SUCCEEDED" and fresh.c.attempt == 1
        assert all(t.state.finished or t.stopping for t in fresh.c.tasks.values())  # nothing waits
        return
    assert fresh.c.attempt == 2 and fresh.c.decision is None
    if executors[succeeded].phase == "done":  # told to exit before the gang started again: a new container
        assert fresh.cluster.requests == [("worker", 1)]
        new2 = fresh.allocate("worker")
        fresh.c.on_started(new2)
        executors[succeeded] = Executor(fresh, succeeded, new2, 2, 6000, "new")
        executors[succeeded].register()
    took = _until_served(fresh, list(executors.values()), fresh.spec.registration_timeout_ms / 1000)
    assert took is not None and took < fresh.spec.lease_s + 5, took
    assert fresh.c.state == JobState.RUNNING and (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (1, 0)


def test_a_gang_waiting_only_for_a_sidecar_whose_run_ended_is_served_at_its_result(tmp_path):
    """The result that ends a run a gang waits on is where the AM looks at the gang again (as it
    must for a run that ended under an earlier AM attempt): a sidecar that failed before it
    registered leaves the others waiting for nothing, and they are served at once."""
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.tensorboard.instances=1")
    worker, tensorboard = h.allocate("worker"), h.allocate("tensorboard")
    assert h.register("worker:0", 0, worker, 2000)["ok"]
    assert h.wait_spec("worker:0", 0, worker, 0) is None
    assert h.report_result("tensorboard:0", 0, tensorboard, 1, None) == {"action": "exit"}
    assert h.c.state == JobState.RUNNING and served_cluster(h.wait_spec("worker:0", 0, worker, 0)) == {
        "worker": ["host1:2000"]}
