"""Node blacklisting (tony.task.max-failures-per-node) on real hosts: YARN's blacklist holds host
names, so it needs the Docker cluster's nodes (the one-host cluster's NodeManagers share one)."""

from __future__ import annotations

import json
from pathlib import Path

from support import Background, executor_pid, history_of, tasks_running, wait_for


def test_a_node_where_a_task_failed_once_gets_no_replacement_with_max_failures_1(cluster, probe_args, tmp_path):
    shared = Path(cluster.launcher.load_state().shared_dir) / tmp_path.name
    release = shared / "release"
    args = probe_args("tony.worker.instances=1", "tony.worker.memory=512m", "tony.am.retry-count=1",
                      "tony.task.max-failures-per-node=1")
    args[args.index("--task_params") + 1] = f"--out {shared}/probe --until-file {release}"
    job = Background(cluster, args)
    try:
        status = wait_for(lambda: tasks_running(cluster, job), 180, "the worker to run")
        first = status["tasks"][0]
        # its executor dies (the task with it): a failure that is not the user's own exit code
        daemon = cluster.daemon_on(first["host"])
        cluster.run_on(daemon, "kill", "-9", str(executor_pid(cluster, job.app_id, first["container_id"])))
        second = wait_for(lambda: tasks_running(cluster, job, attempt=1), 180, "the replacement to run")["tasks"][0]
        release.parent.mkdir(parents=True, exist_ok=True)
        release.touch()
        run = job.wait(timeout=180)
    finally:
        release.parent.mkdir(parents=True, exist_ok=True)
        release.touch()
    assert run.rc == 0, run.output[-4000:]
    assert second["host"] != first["host"], (first["host"], second["host"])  # kept off the blacklisted node
    history = history_of(cluster, run.app_id)
    blacklisted = [e for e in history["events"] if e["kind"] == "NODE_BLACKLISTED"]
    assert [e["node_id"] for e in blacklisted] == [first["node_id"]], json.dumps(blacklisted)
    assert "tony.task.max-failures-per-node=1" in blacklisted[0]["message"]
    # the executor's death is the user's budget's (a lost executor), not the infrastructure's
    assert (history["restarts_used"], history["infra_restarts_used"]) == (1, 0), \
        [e["message"] for e in history["events"] if e["kind"] == "RESTART_DECIDED"]
