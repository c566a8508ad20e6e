"""The HA tests' cluster: two ResourceManagers (rm1, rm2) that fail over through a ZooKeeper of
their own, work-preserving recovery, NodeManager recovery; started once for these tests by the
same launcher users run (`tony cluster up --ha`) and stopped after them. Here `cluster` is that
cluster, its REST calls going to whichever RM is active, so the parent conftest's fixtures (`tony`,
`probe_args`, the leftover check) work on it unchanged. `launcher` kills and restarts its daemons."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support import ROOT, Cluster, wait_for
from tony_py.cluster import LocalCluster
from tony_py.cluster import availability


@pytest.fixture(scope="package")
def launcher() -> LocalCluster:
    return LocalCluster(ROOT / ".test-ha-cluster")


@pytest.fixture(scope="package")
def cluster(request, launcher) -> Cluster:
    launcher.down(purge=True)  # whatever an aborted earlier session left
    state, _ = launcher.up(timeout=240, ha=True)
    print(f"\n[HA cluster] up in {state.up_seconds} s: {launcher.status().get('daemon_rss_mb')}", file=sys.stderr)
    handle = Cluster("ha", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir), launcher.workdir,
                     state.nodemanagers, launcher=launcher, rm_webs=list(state.rm_webs.values()))
    yield handle
    failed = request.session.testsfailed
    launcher.down(purge=not failed)
    if failed:
        print(f"\n[HA cluster] {failed} test(s) failed: logs kept in {launcher.workdir}", file=sys.stderr)


@pytest.fixture
def both_rms_back(cluster, launcher):
    """Whatever a test did to the RMs and ZooKeeper, all run again afterwards, one of them active."""
    yield
    for name in ("zookeeper", "resourcemanager1", "resourcemanager2"):
        launcher.restart_daemon(name)
    webs = launcher.load_state().rm_webs
    wait_for(lambda: availability.active_rm_web(webs), 120, "an active ResourceManager")


def active_rm_daemon(launcher: LocalCluster) -> str:
    """The daemon name of the active RM (rm2 -> resourcemanager2), waiting for one to be active."""
    webs = launcher.load_state().rm_webs
    rm_id = wait_for(lambda: next((rm for rm, s in availability.ha_states(webs).items() if s == "ACTIVE"), None),
                     120, "an active ResourceManager")
    return availability.rm_daemon(rm_id)
