"""The restart policy's keys, each proven once on the real cluster (their logic has unit tests in
tests/unit/test_coordinator.py; here YARN, the executors and the AM decide for real):
tony.application.retryable-exit-codes, tony.task.max-missed-heartbeats (with
tony.task.heartbeat-interval-ms) and tony.container.registration.timeout. Node blacklisting
(tony.task.max-failures-per-node) needs nodes with host names of their own: it is proven on the
Docker cluster (tests/integration/multihost/test_node_policies.py)."""

from __future__ import annotations

import re
import stat

import psutil
import pytest

from support import PYTHON, Background, executor_pid, history_of, probe_records, tasks_running, wait_for


@pytest.mark.parametrize("code,restarts", [(3, 1), (4, 0)])
def test_a_listed_exit_code_restarts_the_gang_and_another_does_not(code, restarts, tony, probe_args, tmp_path,
                                                                  cluster):
    """3 is listed: the gang restarts from the user's budget and the job succeeds in attempt 1.
    4 is not: the job fails at once with it, the budget untouched."""
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m", "tony.am.retry-count=1",
                           "tony.application.retryable-exit-codes=3,5",
                           params=f"--fail worker:0:{code} --once --after-end worker:0"))
    history = history_of(cluster, run.app_id)
    assert (history["restarts_used"], history["infra_restarts_used"]) == (restarts, 0), history["diagnostics"]
    attempts = {r["TONY_RESTART_ATTEMPT"] for r in probe_records(tmp_path).values()}
    if restarts:
        assert run.rc == 0, run.output[-3000:]
        assert f"exit code {code}" in run.stdout and "restart 1 of 1" in run.stdout, run.stdout[-3000:]
        assert attempts == {"1"}  # both tasks' last run was the second gang attempt
    else:
        assert run.rc == 1, run.output[-3000:]
        assert "exit code 4" in history["diagnostics"] and "restarting" not in history["diagnostics"]
        assert attempts == {"0"}


def test_a_silent_executor_is_lost_after_the_configured_heartbeats(cluster, probe_args, tmp_path):
    """worker:1's executor is frozen (its task runs on): after 4 missed heartbeats of 500 ms, not
    the default 5 × 1 s, the AM counts it lost, stops its container and restarts the gang."""
    release = tmp_path / "release"
    job = Background(cluster, probe_args("tony.worker.instances=2", "tony.worker.memory=512m", "tony.am.retry-count=1",
                                         "tony.task.heartbeat-interval-ms=500", "tony.task.max-missed-heartbeats=4",
                                         params=f"--until-file {release}"))
    frozen = None
    try:
        status = wait_for(lambda: tasks_running(cluster, job), 120, "both tasks to run")
        container = next(t["container_id"] for t in status["tasks"] if t["name"] == "worker:1")
        frozen = psutil.Process(executor_pid(cluster, job.app_id, container))
        frozen.suspend()
        wait_for(lambda: tasks_running(cluster, job, attempt=1), 180, "the gang's second attempt to run")
        release.touch()
        run = job.wait(timeout=180)
    finally:
        release.touch()
        if frozen is not None and frozen.is_running():
            frozen.resume()
    assert run.rc == 0, run.output[-4000:]
    history = history_of(cluster, run.app_id)
    assert (history["restarts_used"], history["infra_restarts_used"]) == (1, 0)
    lost = [e["message"] for e in history["events"] if e["kind"] == "TASK_FINISHED" and e.get("task") == "worker:1"
            and e.get("failure_kind") == "lost"]
    assert lost, [e["message"] for e in history["events"] if e["kind"] == "TASK_FINISHED"]
    # the AM used the job's keys: 500 ms x 4 = 2.0 s, and waited at least that long
    silent = re.search(r"sent no heartbeat for ([\d.]+) s \(tony.task.heartbeat-interval-ms x "
                       r"tony.task.max-missed-heartbeats = 2.0 s\)", lost[0])
    assert silent and float(silent.group(1)) >= 2.0, lost[0]
    # the frozen executor's container was stopped through its NodeManager: nothing of it is left
    assert not frozen.is_running() or frozen.status() == psutil.STATUS_ZOMBIE


def test_an_executor_that_never_registers_hits_the_registration_timeout(tony, probe_args, tmp_path, cluster):
    """The task's interpreter never starts the executor (it hangs first): after 8 s the AM gives
    the container up as a launch failure that names the key, and stops it."""
    hang = tmp_path / "hanging-python"
    hang.write_text("#!/bin/sh\nexec sleep 600\n")
    hang.chmod(hang.stat().st_mode | stat.S_IXUSR)
    args = probe_args("tony.worker.instances=1", "tony.worker.memory=512m", "tony.container.registration.timeout=8000",
                      f"tony.am.python={PYTHON}")
    args[args.index("--python_binary_path") + 1] = str(hang)
    run = tony(*args)
    assert run.rc == 1, run.output[-3000:]
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert "worker:0" in diagnostics, diagnostics
    assert "its executor did not register within 8 s (tony.container.registration.timeout)" in diagnostics, diagnostics
    assert not probe_records(tmp_path)  # the task never ran
    # (the leftover check after every test finds no `sleep` left in the container: it was stopped)
