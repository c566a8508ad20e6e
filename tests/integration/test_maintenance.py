"""The one-host cluster's own maintenance under a running job: its lone ResourceManager restarted
after longer than the cluster's clients wait for it (work-preserving recovery: the job rides
through untouched, the client says the RM was away and for how long), and a node lost with the
AM and a worker on it (one rule for every lost task: the next AM attempt restarts the gang once,
on the infrastructure's budget, and the job finishes every task)."""

from __future__ import annotations

import re
import time

import psutil
import pytest

from ha.maintenance import SteppingJob, am_attempts, survival_problems
from stepper import split_brain, writers
from support import history_of, wait_for
from tony_py.cluster import LocalCluster

RM_AWAY_S = 25  # longer than the cluster's clients retry an RM (20 s): the client meets the outage itself


@pytest.fixture
def launcher(cluster):
    if cluster.workdir is None:
        pytest.skip("needs the process launcher to kill and restart daemons")
    launcher = LocalCluster(cluster.workdir)
    yield launcher
    for name in ("resourcemanager", "nodemanager1", "nodemanager2"):
        launcher.restart_daemon(name)


def test_a_restarted_resourcemanager_costs_a_running_job_nothing(cluster, launcher, tmp_path):
    job = SteppingJob(cluster, tmp_path / "job", steps=600, step_time=0.1)
    job.wait_stepping(5)
    launcher.kill_daemon("resourcemanager")
    job.wait_stepping(50)  # training goes on without any RM
    time.sleep(max(0.0, RM_AWAY_S - 5))
    launcher.restart_daemon("resourcemanager")
    run = job.finish(timeout=300)
    assert survival_problems(cluster, job, run) == []
    assert "the ResourceManager does not answer" in run.stdout
    away = re.search(r"the ResourceManager answers again after (\d+) s", run.stdout)
    assert away and int(away.group(1)) >= RM_AWAY_S - 5, run.stdout[-3000:]


def test_a_lost_node_with_the_am_and_a_worker_costs_one_infrastructure_restart(cluster, launcher, tmp_path):
    """The AM asks for a GPU (only nm1 has them) and each worker for 7 GB, so one worker runs
    beside the AM on nm1 and the other on nm2 (neither node fits two). nm1 then dies as a machine
    does (its NodeManager and every process of its containers); YARN loses it after its expiry and
    starts AM attempt 2 on nm2, which restarts the gang once, on the infrastructure's budget (as
    for any lost node), once nm1 is back."""
    job = SteppingJob(cluster, tmp_path / "job", "tony.am.gpus=1", "tony.worker.memory=7g",
                      "tony.am.retry-count=0", steps=400, step_time=0.1)
    job.wait_stepping(5)
    containers = [ws[-1].container for ws in writers(job.steps()).values()]
    nm1 = str(cluster.workdir / "data" / "nm1") + "/"
    on_nm1 = [p for p in psutil.process_iter(["cwd"]) if (p.info.get("cwd") or "").startswith(nm1)]
    assert any("_000001" in (p.info.get("cwd") or "") for p in on_nm1), "the AM is not on nm1"
    assert sum(any(c in (p.info.get("cwd") or "") for p in on_nm1) for c in containers) == 1, containers
    launcher.kill_daemon("nodemanager1")
    for proc in on_nm1:
        try:
            proc.kill()
        except psutil.Error:
            pass
    nm1_id = next(n["id"] for n in cluster.nodes() if n["nodeHTTPAddress"].endswith(
        f":{cluster.nodemanagers[0]['nm_web_port']}"))
    wait_for(lambda: next((n["state"] for n in cluster.nodes() if n["id"] == nm1_id), None) == "LOST", 120,
             "YARN to lose nm1")
    launcher.restart_daemon("nodemanager1")  # the machine is back
    run = job.finish(timeout=400)
    assert run.rc == 0, run.output[-4000:]
    assert am_attempts(cluster, run.app_id) == 2
    history = history_of(cluster, run.app_id)
    assert (history["restarts_used"], history["infra_restarts_used"]) == (0, 1), \
        [e["message"] for e in history["events"] if e["kind"] in ("RESTART_DECIDED", "AM_FAILOVER", "NOTE")]
    steps = job.steps()
    assert split_brain(steps) == []
    for task in ("worker:0", "worker:1"):  # every task finished its training, resumed from its checkpoint
        assert max(s["step"] for s in steps if s["task"] == task) == job.total_steps
