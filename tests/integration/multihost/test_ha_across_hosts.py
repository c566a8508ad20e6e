"""`tony cluster up --docker --ha`: ZooKeeper, rm1 and rm2 each a host of their own, and a running
job through the active RM's host killed (the pair's fail-over across hosts; the process cluster's
HA tests, tests/integration/ha, cover the rest of the maintenance faults)."""

from __future__ import annotations

import sys
from pathlib import Path

from ha.maintenance import SteppingJob, survival_problems
from support import ROOT, Cluster, wait_for
from tony_py.cluster import availability
from tony_py.cluster.docker import DockerCluster
from tony_py.cluster.faults import Faults


def test_a_job_rides_through_the_active_rms_host_killed(cluster):
    launcher = DockerCluster(ROOT / ".test-docker-ha-cluster")
    launcher.down(purge=True)
    try:
        state, _ = launcher.up(nodes=1, ha=True, timeout=300,
                               log=lambda line: print(f"\n[docker HA cluster] {line}", file=sys.stderr))
        webs = state.rm_webs
        assert set(launcher.status()["rm_ids"]) == {"rm1", "rm2"}
        pair = Cluster("docker-ha", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir),
                       launcher.workdir, state.nodemanagers, launcher=launcher, rm_webs=list(webs.values()))
        job = SteppingJob(pair, Path(state.shared_dir) / "job", steps=400, step_time=0.1)
        job.wait_stepping(5)
        active = wait_for(lambda: availability.active_rm_web(webs), 60, "an active RM")
        killed = availability.rm_daemon(next(rm for rm, url in webs.items() if url == active))
        Faults(launcher).kill(killed)
        wait_for(lambda: availability.active_rm_web(webs) not in (None, active), 120, "the other RM to take over")
        run = job.finish(timeout=300)
        assert survival_problems(pair, job, run) == []
    finally:
        launcher.down(purge=True)
