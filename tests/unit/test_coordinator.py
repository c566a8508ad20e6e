"""The AM's job logic against a fake cluster port (pure logic: no YARN involved)."""

import json

import pytest

from harness import Harness, served_cluster
from tony_py.frameworks.envplan import expand


def served_env(answer: dict) -> dict:
    return expand(answer["env"], answer.get("shared"))
from tony_py.am.core import recovery
from tony_py.am.core.state import JobState
from tony_py.am.core.failover import AmSnapshot
from tony_py.job.records import TaskState


def test_happy_path_two_workers(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    assert h.cluster.requests == [("worker", 2)]
    h.bring_up()
    assert h.c.state == JobState.RUNNING
    spec = h.wait_spec("worker:1", 0, h.containers["worker:1"], 0)
    assert served_cluster(spec) == {"worker": ["host1:2000", "host2:2001"]}
    assert spec["env"]["TF_CONFIG"]
    assert h.result("worker:1") == {"action": "exit"}
    assert h.c.decision is None
    h.result("worker:0")
    assert h.c.final_status == "SUCCEEDED"
    h.complete("worker:0")
    h.complete("worker:1")
    assert h.c.done


def test_an_ask_heartbeats_in_a_burst_until_the_first_grant_then_relaxes(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    assert h.cluster.heartbeats == [recovery.BURST_HEARTBEAT_MS]
    h.allocate("worker")
    assert h.cluster.heartbeats[-1] == recovery.FAST_HEARTBEAT_MS  # one came: the rest are on their way
    h.allocate("worker")
    assert h.cluster.heartbeats[-1] == recovery.SLOW_HEARTBEAT_MS  # nothing outstanding


def test_an_ask_nobody_meets_bursts_for_at_most_burst_s(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    h.c.tick()
    assert h.cluster.heartbeats == [recovery.BURST_HEARTBEAT_MS]
    h.clock.now += recovery.BURST_S
    h.c.tick()
    assert h.cluster.heartbeats == [recovery.BURST_HEARTBEAT_MS, recovery.FAST_HEARTBEAT_MS]
    h.clock.now += 60
    h.c.tick()
    assert h.cluster.heartbeats[-1] == recovery.FAST_HEARTBEAT_MS and len(h.cluster.heartbeats) == 2


def test_gang_waits_for_every_task(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    c1 = h.allocate("worker")
    h.register("worker:0", 0, c1, 2000, None)
    assert h.wait_spec("worker:0", 0, c1, 0) is None  # worker:1 not registered yet
    c2 = h.allocate("worker")
    h.register("worker:1", 0, c2, 2001, None)
    assert served_cluster(h.wait_spec("worker:0", 0, c1, 0))["worker"] == ["host1:2000", "host2:2001"]


def test_surplus_container_is_released(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1")
    h.allocate("worker")
    extra = h.allocate("worker")
    assert h.cluster.released == [extra]


def test_chief_failure_fails_the_job_with_its_exit_code_and_stderr(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    h.bring_up()
    h.result("worker:0", code=3, stderr="Traceback...\nValueError: boom")
    assert h.c.final_status == "FAILED"
    diag = h.c.diagnostics()
    assert "worker:0" in diag and "exit code 3" in diag and "ValueError: boom" in diag
    assert h.containers["worker:1"] in h.cluster.stopped  # the rest is stopped
    h.complete("worker:1", -105)
    h.complete("worker:0", 3)
    assert h.c.done and h.c.tasks["worker:1"].state == TaskState.STOPPED


def test_non_chief_failure_is_tolerated_by_default(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    h.bring_up()
    h.result("worker:1", code=3)
    assert h.c.decision is None
    h.result("worker:0")
    assert h.c.final_status == "SUCCEEDED"
    assert "worker:1" in h.c.diagnostics()


def test_fail_on_worker_failure(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.application.fail-on-worker-failure-enabled=true")
    h.bring_up()
    h.result("worker:1", code=3)
    assert h.c.final_status == "FAILED" and "worker:1" in h.c.diagnostics()


def test_chief_success_stops_untracked_ps(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.ps.instances=1")
    h.bring_up()
    h.result("worker:0")
    assert h.c.final_status == "SUCCEEDED"
    assert h.cluster.stopped == [h.containers["ps:0"]]
    h.complete("ps:0", -105)
    h.complete("worker:0")
    assert h.c.done and h.c.tasks["ps:0"].state == TaskState.STOPPED


def test_ps_failure_fails_the_job(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.ps.instances=1")
    h.bring_up()
    h.result("ps:0", code=1)
    assert h.c.final_status == "FAILED" and "stop-on-failure" in h.c.diagnostics()


def test_a_failed_worker_is_tolerated_when_the_chief_succeeds(tmp_path):
    h = Harness(tmp_path, "tony.chief.instances=1", "tony.worker.instances=1")
    h.bring_up()
    h.result("worker:0", code=2)
    assert h.c.decision is None
    h.result("chief:0", code=0)
    assert h.c.final_status == "SUCCEEDED" and "some worker tasks failed: worker:0" in h.c.diagnostics()


def test_all_tracked_failed_is_failure(tmp_path):
    # after-chief off and the chief not a tracked failure yet: workers fail one by one
    h = Harness(tmp_path, "tony.worker.instances=3")
    h.bring_up()
    h.result("worker:1", code=2)
    h.result("worker:2", code=2)
    assert h.c.decision is None
    from tony_py.am.core import policy
    h.c.tasks["worker:0"].enter(TaskState.FAILED, "for the test")  # the policy's own view: every tracked task failed
    h.c.tasks["worker:0"].failure = h.c.tasks["worker:1"].failure
    decision = policy.completion(h.spec, h.c.tasks)
    assert decision.action == policy.Action.FAIL and "every tracked task failed" in decision.message


def test_lost_heartbeat_fails_the_task(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.task.heartbeat-interval-ms=1000",
                "tony.task.max-missed-heartbeats=3")
    h.bring_up()
    h.clock.now += 2.5
    h.c.tick()
    assert h.c.decision is None
    h.clock.now += 1.0
    h.c.tick()
    assert h.c.final_status == "FAILED" and "no heartbeat" in h.c.diagnostics()


def test_executor_dying_without_result(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1")
    h.bring_up()
    h.complete("worker:0", 137)
    assert h.c.final_status == "FAILED"
    assert "without reporting a result" in h.c.diagnostics() and "137" in h.c.diagnostics()


def test_application_timeout(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.application.timeout=5000")
    h.bring_up()
    h.clock.now += 6
    h.c.tick()
    assert h.c.final_status == "FAILED" and "tony.application.timeout" in h.c.diagnostics()


# ---- gang restarts -----------------------------------------------------------------------------
def test_signal_restarts_the_gang_in_place(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    answer = h.result("worker:1", code=None, signal="SIGKILL")
    assert answer == {"action": "restart", "attempt": 1}
    assert h.c.attempt == 1 and h.c.decision is None
    # the healthy worker learns on its next heartbeat; no new container is requested
    assert h.heartbeat("worker:0", 0, h.containers["worker:0"], {}) == {"action": "restart", "attempt": 1}
    assert h.cluster.requests == [("worker", 2)]
    for i, name in enumerate(["worker:0", "worker:1"]):
        assert h.register(name, 1, h.containers[name], 3000 + i, None)["ok"]
    env = h.wait_spec("worker:0", 1, h.containers["worker:0"], 0)["env"]
    assert env["TONY_RESTART_ATTEMPT"] == "1" and env["NUM_AM_RETRIES"] == "1"
    # a message from the old attempt changes nothing
    assert h.report_result("worker:0", 0, h.containers["worker:0"], 1, None)["action"] == "restart"
    assert h.c.decision is None
    # restarts used up: TonY's rule tolerates a failed non-chief worker ...
    h.task_started("worker:1", 1, h.containers["worker:1"], 1)
    assert h.report_result("worker:1", 1, h.containers["worker:1"], None, "SIGKILL") == {"action": "exit"}
    assert h.c.decision is None
    # ... but the chief failing once more than allowed fails the job with the root cause
    h.task_started("worker:0", 1, h.containers["worker:0"], 1)
    h.report_result("worker:0", 1, h.containers["worker:0"], None, "SIGKILL")
    assert h.c.final_status == "FAILED"
    # the root cause is the first failure of the final attempt, not the last straw
    assert "Root cause: worker:1 (attempt 1" in h.c.diagnostics() and "SIGKILL" in h.c.diagnostics()
    assert h.c.restarts_used == 1


def test_non_retryable_exit_fails_without_restart(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=3")
    h.bring_up()
    h.result("worker:0", code=3)
    assert h.c.final_status == "FAILED" and h.c.restarts_used == 0


def test_listed_exit_code_is_retryable(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.am.retry-count=1",
                "tony.application.retryable-exit-codes=75,76")
    h.bring_up()
    assert h.result("worker:0", code=75)["action"] == "restart"


def test_lost_container_is_replaced_on_restart(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    h.complete("worker:1", -100)  # ABORTED: node lost
    assert h.c.attempt == 1
    assert h.cluster.requests == [("worker", 2), ("worker", 1)]
    assert h.c.tasks["worker:1"].state == TaskState.PENDING
    assert h.c.tasks["worker:0"].state == TaskState.LAUNCHED  # kept in place
    new = h.allocate("worker")
    assert h.c.tasks["worker:1"].container.id == new
    assert h.cluster.launched[-1] == new


@pytest.mark.parametrize("override", ["tony.application.retry-on-signal=false"])
def test_signal_retry_can_be_disabled(tmp_path, override):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.am.retry-count=1", override)
    h.bring_up()
    h.result("worker:0", code=None, signal="SIGKILL")
    assert h.c.final_status == "FAILED"


# ---- timeouts ----------------------------------------------------------------------------------
def test_allocation_timeout_names_what_is_missing(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=3", "tony.ps.instances=1", "tony.worker.memory=4g",
                "tony.container.allocation.timeout=10000")
    h.allocate("worker")
    h.clock.now += 11
    h.c.tick()
    assert h.c.final_status == "FAILED"
    diag = h.c.diagnostics()
    assert "tony.container.allocation.timeout" in diag
    assert "2 of 3 worker (4096 MB, 1 vcores each)" in diag and "1 of 1 ps" in diag
    # the requests still outstanding, of both types, withdrawn by the ids they were made under
    assert sorted(h.cluster.cancelled) == sorted(h.cluster.request_ids[t] for t in ("worker", "ps"))


def test_registration_timeout(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.container.registration.timeout=5000")
    cid = h.allocate("worker")
    h.c.on_started(cid)
    h.clock.now += 6
    h.c.tick()
    assert h.c.final_status == "FAILED" and "did not register" in h.c.diagnostics()
    assert cid in h.cluster.stopped


def test_progress_timeout_kills_a_hung_task(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.task.progress-timeout-ms=5000")
    h.bring_up()
    h.clock.now += 4
    h.heartbeat("worker:0", 0, h.containers["worker:0"], {}, progress_age_s=0.5)
    h.heartbeat("worker:1", 0, h.containers["worker:1"], {}, progress_age_s=None)
    h.clock.now += 2
    h.c.tick()
    assert h.c.tasks["worker:1"].state == TaskState.FAILED  # hung since it started
    assert h.c.decision is None  # a non-chief worker: TonY's tolerance
    assert h.containers["worker:1"] in h.cluster.stopped
    assert h.heartbeat("worker:1", 0, h.containers["worker:1"], {})["action"] == "exit"
    h.clock.now += 4
    h.c.tick()
    assert h.c.final_status == "FAILED" and "made no progress" in h.c.diagnostics()  # now the chief


def test_tasks_lingering_after_the_chief_are_stopped(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.evaluator.instances=1",
                "tony.application.after-chief-timeout-ms=30000", "tony.task.max-missed-heartbeats=1000")
    h.bring_up()
    h.result("worker:0")
    h.clock.now += 29
    h.c.tick()
    assert h.c.decision is None
    h.clock.now += 2
    h.c.tick()
    assert h.c.final_status == "SUCCEEDED"
    assert "stopped worker:1, evaluator:0" in h.c.diagnostics()
    assert set(h.cluster.stopped) == {h.containers["worker:1"], h.containers["evaluator:0"]}


def test_node_with_repeated_failures_is_blacklisted(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.am.retry-count=5", "tony.task.max-failures-per-node=2")
    cid = h.allocate("worker")
    node = h.c.tasks["worker:0"].container.node_id
    h.c.on_started(cid)
    h.c.on_completed(cid, -100, "lost")
    assert h.cluster.blacklisted == []
    h.c.on_allocated({"id": "c2", "node_id": node, "host": "h", "node_http": "", "resource": {},
                      "allocation_request_id": 0, "priority": 0})
    h.c.on_started("c2")
    h.c.on_completed("c2", -100, "lost")
    assert h.cluster.blacklisted == [node]


def test_a_node_whose_executor_went_silent_gets_no_replacement_for_a_while(tmp_path):
    """YARN still counts the node healthy (only its path to the AM is cut): a replacement put
    there would be cut off as well and cost a second restart."""
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2")
    h.bring_up()
    silent = h.c.tasks["worker:1"].container.node_id
    h.clock.now += 3
    h.heartbeat("worker:0", 0, h.containers["worker:0"], {})
    h.clock.now += 3  # worker:1 silent for 6 s: past the 5 s expiry
    h.c.tick()
    assert h.c.restarts_used == 1 and h.cluster.blacklisted == [silent]
    h.clock.now += 1
    h.allocate("worker")  # other nodes took the gang's new containers
    h.allocate("worker")
    h.clock.now += recovery.AVOID_NODE_S - 2
    h.heartbeat("worker:0", 1, h.containers["worker:0"], {})
    h.c.tick()
    assert h.cluster.blacklisted == [silent]
    h.clock.now += 1
    h.c.tick()
    assert h.cluster.blacklisted == []  # given back to YARN's scheduling


def test_a_held_back_node_is_given_back_when_no_other_node_grants_the_replacement(tmp_path):
    """The hold is worth it only where another node can take the task: a request unmet for
    AVOID_UNMET_S says none can, and waiting out the hold would only delay the job."""
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2")
    h.bring_up()
    silent = h.c.tasks["worker:1"].container.node_id
    h.clock.now += 3
    h.heartbeat("worker:0", 0, h.containers["worker:0"], {})
    h.clock.now += 3
    h.c.tick()  # the gang restart asks for two containers
    assert h.c.restarts_used == 1 and h.cluster.blacklisted == [silent]
    h.clock.now += recovery.AVOID_UNMET_S - 0.5
    h.c.tick()
    assert h.cluster.blacklisted == [silent]
    h.allocate("worker")  # another node granted one of the two: the hold is still worth it
    h.clock.now += recovery.AVOID_UNMET_S - 0.5
    h.c.tick()
    assert h.cluster.blacklisted == [silent]
    h.clock.now += 0.5  # then nothing for AVOID_UNMET_S
    h.c.tick()
    assert h.cluster.blacklisted == []
    assert any(f"{silent} takes new containers again" in e["message"] for e in h.c.events.recent)


def test_a_node_whose_host_is_the_only_one_the_job_knows_is_never_held_back(tmp_path):
    """YARN holds back host names: two NodeManagers of one machine (the process cluster) are one
    host, and holding it back would leave the replacement nowhere to go."""
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2")
    for _ in range(2):
        h.allocate("worker", host="localhost")
    for name, task in h.c.tasks.items():
        h.containers[name] = task.container.id
        h.c.on_started(task.container.id)
        h.register(name, 0, task.container.id, 2000, None)
    for name in h.c.tasks:
        h.wait_spec(name, 0, h.containers[name], 0)
        h.task_started(name, 0, h.containers[name], 100)
    h.clock.now += 3
    h.heartbeat("worker:0", 0, h.containers["worker:0"], {})
    h.clock.now += 3
    h.c.tick()  # worker:1 went silent: a gang restart
    assert h.c.restarts_used == 1 and h.cluster.blacklisted == []
    assert any("shares its host name" in e["message"] for e in h.c.events.recent)


def test_a_single_task_job_still_holds_back_its_silent_node_on_a_bigger_cluster(tmp_path):
    """One node known says nothing about the others: the hold stands (bounded by AVOID_UNMET_S)."""
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.am.retry-count=2")
    h.bring_up()
    silent = h.c.tasks["worker:0"].container.node_id
    h.clock.now += 6
    h.c.tick()
    assert h.c.restarts_used == 1 and h.cluster.blacklisted == [silent]


def test_the_last_node_of_a_cluster_is_never_avoided(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.am.retry-count=2")
    h.cluster.nodes = 1
    h.bring_up()
    h.clock.now += 6
    h.c.tick()
    assert h.c.restarts_used == 1 and h.cluster.blacklisted == []
    assert any("last node" in e["message"] for e in h.c.events.recent)


# ---- AM fail-over ------------------------------------------------------------------------------
def test_new_am_attempt_readopts_running_tasks(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.ps.instances=1")
    h.bring_up()
    for name in h.containers:
        h.c.tasks[name].control_url = f"http://{name}"
    snap = AmSnapshot.from_dict(json.loads(json.dumps(h.c.snapshot().to_dict())))  # through JSON, as on HDFS
    live = [{"id": cid} for cid in h.containers.values()]

    fresh = Harness(tmp_path, "tony.worker.instances=2", "tony.ps.instances=1", start=False)
    adopted = fresh.c.adopt(snap, live)
    fresh.c.start()
    assert sorted(t.name for t in adopted) == ["ps:0", "worker:0", "worker:1"]
    assert fresh.cluster.requests == []  # nothing to re-request
    assert fresh.c.state == JobState.RUNNING and fresh.c.attempt == 0
    # the running executors carry on against the new AM
    assert fresh.heartbeat("worker:1", 0, h.containers["worker:1"], {}) == {"action": "continue"}
    fresh.containers = h.containers
    fresh.result("worker:0")
    fresh.result("worker:1")
    assert fresh.c.final_status == "SUCCEEDED"


def test_new_am_attempt_restarts_when_a_task_died_meanwhile(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    fresh = h.next_attempt(live=["worker:0"])  # worker:1's container is gone
    assert [t.name for t in fresh.adopted] == ["worker:0"]
    # it went with the earlier AM attempt: the cluster's doing, so the infrastructure's budget pays
    assert fresh.c.attempt == 1 and (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (0, 1)
    fresh.c.start()  # as the AM does after adopting: nothing is asked twice
    assert fresh.cluster.requests == [("worker", 1)]
    assert "lost while no AM was running" in " ".join(fresh.c.events.lines())


def test_a_lost_node_costs_one_restart_not_one_per_task(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    h.complete("worker:0", -100)  # the node of both workers is lost: first completion...
    assert h.c.attempt == 1 and h.c.tasks["worker:1"].kept
    h.complete("worker:1", -100)  # ...and the second, before worker:1 came back
    # one restart, from the infrastructure's budget: a lost node is not the user's failure
    assert h.c.decision is None and h.c.infra_restarts_used == 1 and h.c.restarts_used == 0
    assert h.cluster.requests == [("worker", 2), ("worker", 1), ("worker", 1)]
    assert [t.state for t in h.c.tasks.values()] == [TaskState.PENDING, TaskState.PENDING]


def test_waiting_for_the_spec_counts_as_alive(tmp_path):
    import threading
    import time

    h = Harness(tmp_path, "tony.worker.instances=2")
    c1, c2 = h.allocate("worker"), h.allocate("worker")
    h.c.on_started(c1)
    h.register("worker:0", 0, c1, 2000, None)
    answers = []
    parked = threading.Thread(target=lambda: answers.append(h.wait_spec("worker:0", 0, c1, 30)))
    parked.start()  # its executor long-polls for the spec: a real wait, not a flag set by hand
    deadline = time.monotonic() + 5
    while h.c.tasks["worker:0"].polling == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert h.c.tasks["worker:0"].polling == 1
    h.clock.now += 30  # far past the heartbeat expiry
    h.c.tick()
    assert h.c.tasks["worker:0"].state == TaskState.REGISTERED
    h.c.on_started(c2)
    h.register("worker:1", 0, c2, 2001, None)  # the gang is complete: the parked call returns
    parked.join(timeout=5)
    assert answers and served_cluster(answers[0]) == {"worker": ["host1:2000", "host2:2001"]}


# ---- regressions found in review ------------------------------------------------------------------
def test_kept_tasks_get_a_fresh_registration_clock_after_a_restart(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=3",
                "tony.container.registration.timeout=600000", "tony.task.max-missed-heartbeats=100000")
    h.bring_up()
    h.clock.now += 3600  # a long job
    for name in h.containers:
        h.heartbeat(name, 0, h.containers[name], {})
    h.result("worker:1", code=None, signal="SIGKILL")
    h.c.tick()
    assert h.c.restarts_used == 1 and h.c.decision is None


def test_gang_task_failing_before_registration_fails_the_job(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    c0 = h.allocate("worker")
    c1 = h.allocate("worker")
    h.c.on_started(c0)
    h.register("worker:0", 0, c0, 2000, None)
    h.c.on_start_failed(c1, "no such file")  # worker:1 never comes
    assert h.c.final_status == "FAILED"
    assert "before every task had registered" in h.c.diagnostics()
    assert c1 in h.cluster.released  # never started: given back, not stopped


def test_a_readopted_task_that_never_reaches_the_new_attempt_went_with_the_old_one(tmp_path):
    """The earlier AM's node was cut off: YARN still lists its tasks' containers, so they are
    re-adopted, but their executors never reach the new attempt. Their silence is the lost
    AM's, as an end while no AM ran would be: the infrastructure's restart, whether the AM's own
    silence detection or YARN's report of the node's containers comes first. A re-adopted task
    that did reach the new attempt and went silent after is an ordinary lost executor."""
    from tony_py.am.core.adoption import ADOPTION_GRACE_S

    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    fresh = h.next_attempt()
    fresh.c.start()
    end = fresh.clock.now + ADOPTION_GRACE_S + 10
    while fresh.clock.now < end and fresh.c.attempt == 0:  # worker:0 found the new AM, worker:1 never does
        fresh.clock.now += 0.5
        fresh.heartbeat("worker:0", 0, h.containers["worker:0"], {})
        fresh.c.tick()
    assert (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (0, 1) and fresh.c.decision is None
    [failure] = fresh.c.failures
    assert failure.task == "worker:1" and failure.lost_with_am and "never reached this AM attempt" in failure.message
    # worker:0 was heard from: its own silence later would be an ordinary lost executor's
    assert fresh.c.tasks["worker:0"].adopted_at is None


def test_a_readopted_executor_that_fenced_while_no_am_answered_went_with_the_old_attempt(tmp_path):
    """Its first word to the new attempt is that it killed its task when no AM answered: the
    lost AM's doing (infrastructure). After it has reached the new attempt, a fence is an
    ordinary lost executor's (the user's budget)."""
    def fresh_after_failover():
        h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2")
        h.bring_up()
        fresh = h.next_attempt()
        fresh.c.start()
        return fresh

    fresh = fresh_after_failover()
    fresh.report_result("worker:1", 0, fresh.containers["worker:1"], None, "SIGKILL", fenced=True)
    assert (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (0, 1)
    assert fresh.c.failures[-1].lost_with_am and "while no AM attempt answered it" in fresh.c.failures[-1].message

    fresh = fresh_after_failover()
    fresh.heartbeat("worker:1", 0, fresh.containers["worker:1"], {})  # it reached the new attempt
    fresh.report_result("worker:1", 0, fresh.containers["worker:1"], None, "SIGKILL", fenced=True)
    assert (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (1, 0) and not fresh.c.failures[-1].lost_with_am


def test_adopt_with_several_lost_tasks_spends_one_restart(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=3", "tony.am.retry-count=1")
    h.bring_up()
    fresh = h.next_attempt(live=["worker:0"])  # worker:1 and worker:2 died
    fresh.c.start()
    assert (fresh.c.restarts_used, fresh.c.infra_restarts_used) == (0, 1) and fresh.c.decision is None
    assert fresh.cluster.requests == [("worker", 2)]
    assert [t.state for t in fresh.c.tasks.values()] == [TaskState.LAUNCHED, TaskState.PENDING, TaskState.PENDING]


def test_no_restart_once_the_chief_succeeded(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2")
    h.bring_up()
    h.result("worker:0")
    h.complete("worker:1", -102)  # preempted while finishing
    assert h.c.restarts_used == 0
    assert h.c.final_status == "SUCCEEDED"  # TonY's rule: a failed non-chief worker is tolerated


def test_executor_ahead_of_the_snapshot_resynchronizes(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    for name in h.containers:
        h.c.tasks[name].control_url = f"http://{name}"
    snap = AmSnapshot.from_dict(json.loads(json.dumps(h.c.snapshot().to_dict())))  # attempt 0; the old AM then restarted to 1 and died
    fresh = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1", start=False)
    fresh.c.adopt(snap, [{"id": c} for c in h.containers.values()])
    fresh.c.start()
    answer = fresh.register("worker:0", 1, h.containers["worker:0"], 3000, None)
    assert answer.get("ok") and fresh.c.attempt == 1 and fresh.c.restarts_used == 0
    assert fresh.heartbeat("worker:1", 0, h.containers["worker:1"], {}) == {"action": "restart", "attempt": 1}


# ---- the job state machine ---------------------------------------------------------------------
def test_restarting_is_observable_until_the_new_gang_is_complete(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=1")
    h.bring_up()
    h.result("worker:1", code=None, signal="SIGKILL")
    assert h.c.state == JobState.RESTARTING
    assert h.c.status()["state"] == "RESTARTING"
    h.register("worker:0", 1, h.containers["worker:0"], 3000, None)
    assert h.c.state == JobState.RESTARTING  # one of two back
    h.register("worker:1", 1, h.containers["worker:1"], 3001, None)
    assert h.c.state == JobState.RUNNING
    states = [e["state"] for e in h.c.events.recent if e["kind"] == "STATE"]
    assert states == ["ALLOCATING", "RUNNING", "RESTARTING", "RUNNING"]


def test_every_job_state_is_reachable_and_transitions_are_checked(tmp_path):
    from tony_py.am.core.state import TRANSITIONS, IllegalTransition

    seen = set()
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.am.retry-count=1")
    h.c.events.listeners.append(lambda e: e["kind"] == "STATE" and seen.add(e["state"]))
    seen.add(h.c.state.value)
    h.bring_up()
    h.result("worker:0", code=None, signal="SIGKILL")
    h.register("worker:0", 1, h.containers["worker:0"], 3000, None)
    h.result("worker:0", attempt=1)
    h.complete("worker:0")
    assert seen == {s.value for s in JobState} == {s.value for s in TRANSITIONS}
    with pytest.raises(IllegalTransition):
        h.c.enter(JobState.RUNNING)  # DONE is final


def test_fcfs_serves_each_task_its_spec_at_once(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.application.distributed-mode=FCFS")
    c1 = h.allocate("worker")
    h.c.on_started(c1)
    h.register("worker:0", 0, c1, 2000, None)
    spec = h.wait_spec("worker:0", 0, c1, 0)  # worker:1 has no container yet
    assert spec is not None and "TF_CONFIG" not in spec["env"] and "CLUSTER_SPEC" not in spec["env"]
    assert h.c.state == JobState.RUNNING


def test_evaluator_failure_is_tolerated_like_a_worker(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.evaluator.instances=1")
    h.bring_up()
    h.result("evaluator:0", code=2)
    assert h.c.decision is None
    h.result("worker:0")
    assert h.c.final_status == "SUCCEEDED" and "evaluator:0" in h.c.diagnostics()


def test_an_untracked_task_other_than_ps_failing_fails_the_job(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.db.instances=1",
                "tony.application.untracked.jobtypes=db", "tony.application.stop-on-failure-jobtypes=")
    h.bring_up()
    h.result("db:0", code=1)
    assert h.c.final_status == "FAILED" and "untracked task db:0" in h.c.diagnostics()


def test_infrastructure_failures_are_not_retried_when_switched_off(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.am.retry-count=2",
                "tony.application.retry-on-infrastructure-failure=false")
    h.bring_up()
    h.complete("worker:0", -100)  # the node was lost
    assert h.c.restarts_used == 0 and h.c.final_status == "FAILED"
    assert "the container was aborted" in h.c.diagnostics()


def test_task_command_per_type(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.ps.instances=1", "tony.ps.command=python ps.py")
    assert h.spec.command_for("ps") == "python ps.py" and h.spec.command_for("worker") == "python t.py"


# ---- policy: pure rules ---------------------------------------------------------------------------
def test_policy_timeouts_and_blacklist_are_pure_functions(tmp_path):
    from tony_py.am.core import policy
    from tony_py.job.records import Failure, FailureKind

    h = Harness(tmp_path, "tony.worker.instances=1", "tony.application.timeout=5000",
                "tony.task.max-failures-per-node=2", "tony.task.progress-timeout-ms=1000")
    spec = h.spec
    assert policy.app_timeout(spec, 0, 5.0) is None and "tony.application.timeout" in policy.app_timeout(spec, 0, 5.1)
    assert not policy.blacklist_node(spec, 1) and policy.blacklist_node(spec, 2)
    from tony_py.am.core.tasks import Copy
    task = h.c.tasks["worker:0"]
    task.restore(0, TaskState.RUNNING, Copy.STARTED, False, "the policy's input")
    task.started_at, task.last_heartbeat = 0.0, 10.0
    assert policy.task_timeout(spec, task, 10.0)[0] == FailureKind.TIMEOUT  # no progress for 10 s
    task.last_progress = 9.5
    assert policy.task_timeout(spec, task, 10.0) is None
    task.container, task.last_contact = object(), 9.5
    assert policy.keep_on_restart(spec, task, 10.0)
    assert not policy.keep_on_restart(spec, task, 12.0)  # silent for two heartbeat intervals: likely hit too
    task.failure = Failure("worker:0", 0, FailureKind.LOST, "gone")
    assert not policy.keep_on_restart(spec, task, 10.0)  # a container whose executor vanished is not reused
    assert not policy.counts_against_node(FailureKind.EXIT_CODE) and policy.counts_against_node(FailureKind.SIGNAL)


def test_a_stalled_am_does_not_blame_its_executors(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.task.max-missed-heartbeats=3")
    h.bring_up()
    h.c.tick()
    h.clock.now += 30  # the AM process itself stood still (frozen, paused): no tick, no heartbeat read
    h.c.tick()
    assert h.c.decision is None and "stood still for 30.0 s" in " ".join(h.c.events.lines())
    h.clock.now += 1.5
    h.c.tick()
    h.clock.now += 1.6  # now the executor really is silent past its 3 s
    h.c.tick()
    assert h.c.final_status == "FAILED" and "no heartbeat" in h.c.diagnostics()


def test_a_replaced_container_gives_its_gpus_to_the_replacement(tmp_path):
    # a one-GPU node: the restarted task must get device 0 again, whichever event comes first
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.worker.gpus=1", "tony.am.retry-count=1",
                "tony.task.heartbeat-interval-ms=1000", "tony.task.max-missed-heartbeats=3")
    h.c.gpus.set_pool("node1:1", ["0"])
    h.bring_up()
    assert h.c.tasks["worker:0"].gpus == ["0"]
    old = h.containers["worker:0"]
    h.clock.now += 5
    h.c.tick()  # heartbeats lost: a gang restart with a new container
    assert h.c.attempt == 1 and old in h.cluster.stopped
    h.c.on_allocated({"id": "container_new", "node_id": "node1:1", "host": "host1", "node_http": "host1:8042",
                      "resource": {}, "allocation_request_id": h.c.book.ids["worker"], "priority": 0})
    assert h.c.decision is None, h.c.diagnostics()
    assert h.c.tasks["worker:0"].gpus == ["0"]
    h.c.on_completed(old, -100, "killed")  # the old container's end, after the new allocation
    assert h.c.gpus.of("container_new") == ["0"] and h.c.decision is None


# ---- preemption -----------------------------------------------------------------------------------
def test_a_preemption_warns_the_task_and_restarts_without_spending_a_user_retry(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")  # tony.am.retry-count=0: no user retries at all
    h.bring_up()
    h.c.on_preemption([h.containers["worker:1"], "container_of_someone_else"], 5000)
    h.c.on_preemption([h.containers["worker:1"]], 5000)  # the message repeats on every allocate response
    warnings = [e for e in h.c.events.recent if e["kind"] == "PREEMPTION"]
    assert len(warnings) == 1 and warnings[0]["deadline"] == h.clock.now + 5 and warnings[0]["task"] == "worker:1"
    beat = h.heartbeat("worker:1", 0, h.containers["worker:1"], None)
    assert beat == {"action": "continue", "preempt": {"deadline": h.clock.now + 5, "left_s": 5.0}}
    assert h.heartbeat("worker:0", 0, h.containers["worker:0"], None) == {"action": "continue"}
    h.clock.now += 1.5
    # the task checkpointed on SIGTERM and exited 0 (its executor says it sent the SIGTERM): that
    # is not success, it is the preemption
    answer = h.report_result("worker:1", 0, h.containers["worker:1"], 0, None, preempted=True)
    assert answer["action"] == "exit"
    failure = h.c.failures[-1]
    assert failure.kind.value == "preempted" and "5 s warning" in failure.message
    assert h.c.restarts_used == 0 and h.c.infra_restarts_used == 1 and h.c.preemptions == 1
    assert h.c.attempt == 1 and h.c.decision is None
    assert h.containers["worker:1"] in h.cluster.stopped  # given back at once, not at YARN's kill
    assert h.c.tasks["worker:0"].kept and h.c.tasks["worker:1"].state == TaskState.PENDING
    # YARN's kill of the container arrives later: the same preemption, not a second one
    h.complete("worker:1", -102)
    assert h.c.preemptions == 1 and h.c.infra_restarts_used == 1
    status = h.c.status()
    assert status["preemptions"] == 1 and status["restarts_used"] == 0 and status["infra_restarts_used"] == 1


def test_an_unwarned_preemption_reads_as_one_and_the_budget_ends_it(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.application.max-infrastructure-restarts=1",
                "tony.yarn.queue=default")
    h.bring_up()
    h.complete("worker:0", -102)  # no warning reached the task: YARN's exit status says it
    assert h.c.tasks["worker:0"].state == TaskState.PENDING and h.c.infra_restarts_used == 1
    assert h.c.failures[-1].kind.value == "preempted"
    cid = h.allocate("worker")
    h.containers["worker:0"] = cid
    h.c.on_started(cid)
    h.register("worker:0", 1, cid, 2100, None)
    h.wait_spec("worker:0", 1, cid, 0)
    h.task_started("worker:0", 1, cid, 101)
    h.complete("worker:0", -102)
    assert h.c.decision is not None and h.c.final_status == "FAILED"
    assert ("YARN preempted the job's containers 2 time(s) in queue default" in h.c.decision.message
            and "tony.application.max-infrastructure-restarts=1 used up" in h.c.decision.message)
    assert h.c.restarts_used == 0


# ---- a smaller gang (tony.<type>.min-instances) ------------------------------------------------------
def test_a_task_yarn_cannot_replace_is_parked_and_the_rest_go_on_renumbered_then_it_is_asked_for_again(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=3", "tony.worker.min-instances=2",
                "tony.container.allocation.timeout=5000", "tony.application.framework=pytorch")
    h.bring_up()
    h.complete("worker:1", -100)  # its node is lost: an infrastructure restart; the others stay in place
    assert h.c.attempt == 1 and h.c.infra_restarts_used == 1
    for name in ("worker:0", "worker:2"):
        assert h.register(name, 1, h.containers[name], 3000, None)["ok"]
        h.c.polling(name, +1)  # parked in the spec long-poll: alive
    h.clock.now += 6  # YARN grants nothing for worker:0 within the allocation timeout
    h.c.tick()
    assert h.c.decision is None and h.c.tasks["worker:1"].state == TaskState.PARKED
    resize = [e for e in h.c.events.recent if e["kind"] == "RESIZE"]
    assert len(resize) == 1 and "worker 3 -> 2 (min 2)" in resize[0]["message"]
    # worker:1's copy on the lost node may still run (as rank 1): the smaller gang, where
    # worker:2 becomes rank 1, waits for that copy's lease to run out (fencing)
    assert h.wait_spec("worker:2", 1, h.containers["worker:2"], 0) is None
    h.clock.now += h.spec.lease_s + 2
    h.c.tick()
    envs = {name: served_env(h.wait_spec(name, 1, h.containers[name], 0)) for name in ("worker:0", "worker:2")}
    assert [(envs[n]["RANK"], envs[n]["WORLD_SIZE"], envs[n].get("TASK_INDEX")) for n in ("worker:0", "worker:2")] == [
        ("0", "2", None), ("1", "2", "1")]
    assert envs["worker:2"]["TASK_NUM"] == "2"
    assert h.c.state.value == "RUNNING" and h.c.status()["tasks"][1]["state"] == "PARKED"
    # the smaller gang finishing is the job succeeding
    for name, pid in (("worker:0", 101), ("worker:2", 102)):
        h.task_started(name, 1, h.containers[name], pid)
        h.result(name, 0, attempt=1)
    assert h.c.final_status == "SUCCEEDED"


def test_the_gang_grows_back_at_the_next_restart(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.worker.min-instances=1", "tony.am.retry-count=1",
                "tony.container.allocation.timeout=5000", "tony.application.framework=pytorch")
    h.bring_up()
    h.complete("worker:1", -100)
    assert h.register("worker:0", 1, h.containers["worker:0"], 3000, None)["ok"]
    h.c.polling("worker:0", +1)
    h.clock.now += 6
    h.c.tick()
    assert h.c.tasks["worker:1"].state == TaskState.PARKED
    h.clock.now += h.spec.lease_s + 2  # worker:1's copy on the lost node is fenced until its lease ran out
    h.c.tick()
    assert served_env(h.wait_spec("worker:0", 1, h.containers["worker:0"], 0))["WORLD_SIZE"] == "1"
    h.task_started("worker:0", 1, h.containers["worker:0"], 101)
    h.result("worker:0", None, "SIGKILL", attempt=1)  # a user retry: the restart asks for worker:1 again
    assert h.c.attempt == 2 and h.c.tasks["worker:1"].state == TaskState.PENDING
    assert h.cluster.requests[-1] == ("worker", 1)
    assert any(e["kind"] == "RESIZE" and "grows back" in e["message"] for e in h.c.events.recent)


def test_min_instances_is_checked(tmp_path):
    from tony_py.config.build import build_job_spec
    from tony_py.config.layers import load_conf
    from tony_py.errors import ConfigError

    def spec(*conf):
        return build_job_spec(load_conf(None, ["tony.containers.command=python t.py", *conf], env={}, cwd=tmp_path))

    assert spec("tony.worker.instances=3", "tony.worker.min-instances=2").type("worker").fewest == 2
    assert spec("tony.worker.instances=3").type("worker").fewest == 3
    for conf, words in ((("tony.worker.instances=2", "tony.worker.min-instances=3"), "must be <= 2"),
                        (("tony.worker.instances=2", "tony.worker.min-instances=0"), "must be >= 1"),
                        (("tony.worker.instances=2", "tony.worker.min-instances=1", "tony.application.framework=horovod"),
                         "cannot shrink"),
                        (("tony.worker.instances=2", "tony.worker.min-instances=1",
                          "tony.application.distributed-mode=FCFS"), "needs tony.application.distributed-mode=GANG")):
        with pytest.raises(ConfigError) as err:
            spec(*conf)
        assert "tony.worker.min-instances" in str(err.value) and words in str(err.value)


def test_a_peer_that_dies_while_another_task_is_preempted_spends_no_user_retry(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")  # no user retries at all
    h.bring_up()
    h.c.on_preemption([h.containers["worker:1"]], 5000)
    h.clock.now += 1
    h.result("worker:0", None, "SIGABRT")  # its collective broke when worker:1 began to checkpoint
    failure = h.c.failures[-1]
    assert failure.during_preemption_of == "worker:1" and "while worker:1 was being preempted" in failure.message
    assert h.c.decision is None and h.c.restarts_used == 0 and h.c.infra_restarts_used == 1
    # worker:1 is not kept for the restart: YARN is taking its container
    assert not h.c.tasks["worker:1"].kept and h.containers["worker:1"] in h.cluster.stopped
    h.c.on_preemption([h.containers["worker:1"]], 5000)  # the message again: not a second warning
    assert h.c.preemptions == 1


def test_a_process_that_ended_before_the_warning_reached_it_succeeded(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1")
    h.bring_up()
    h.c.on_preemption([h.containers["worker:0"]], 5000)
    h.result("worker:0", 0)  # its executor never sent the SIGTERM: the process was done
    assert h.c.final_status == "SUCCEEDED"


def test_the_chief_is_never_parked(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2", "tony.worker.min-instances=1",
                "tony.container.allocation.timeout=5000")
    h.bring_up()
    h.complete("worker:0", -100)
    h.register("worker:1", 1, h.containers["worker:1"], 3000, None)
    h.c.polling("worker:1", +1)
    h.clock.now += 6
    h.c.tick()
    assert h.c.final_status == "FAILED" and "allocation timed out" in h.c.decision.message


def test_a_grant_goes_to_the_lowest_pending_task_though_the_search_starts_where_it_stopped(tmp_path):
    """next_to_grant starts after the last task granted (a job of thousands), and from the first
    again once a task became PENDING again: worker:0 (the chief, here) is granted before
    worker:3 and worker:4, as a full scan would."""
    h = Harness(tmp_path, "tony.worker.instances=5")
    cids = [h.allocate("worker") for _ in range(3)]
    first = h.c.tasks["worker:0"]
    first.start_over(first.attempt, keep_container=False, why="replaced")
    assert first.state == TaskState.PENDING and first.container is None
    assert h.c.next_to_grant("worker") is first
    assert h.c.task_for_container(cids[1]) is h.c.tasks["worker:1"]
    assert h.c.task_for_container(cids[0]) is None  # worker:0 let its container go
