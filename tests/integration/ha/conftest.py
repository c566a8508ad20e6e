"""The HA tests' cluster: two ResourceManagers (rm1, rm2) that fail over through a ZooKeeper of
their own, work-preserving recovery, NodeManager recovery; started once for these tests by the
same launcher users run (`tony cluster up --ha`) and stopped after them. Here `cluster` is that
cluster, its REST calls going to whichever RM is active, so the parent conftest's fixtures (`tony`,
`probe_args`, the leftover check) work on it unchanged. `launcher` kills and restarts its daemons."""

from __future__ import annotations

import re
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


def rms_explained(launcher: LocalCluster) -> str:
    """Why no RM is (or the expected one is not) active: each RM's HA state, whether its process
    and ZooKeeper's run, and the last lines of their logs that say what they did."""
    state = launcher.load_state()
    lines = [f"HA states: {availability.ha_states(state.rm_webs)}"]
    said = re.compile(r"ERROR|WARN|FATAL|Exception|[Tt]ransition|[Ee]lect|[Ff]enc|[Ss]ession")
    for daemon in state.daemons:
        if daemon.name.startswith("resourcemanager") or daemon.name == "zookeeper":
            log = Path(daemon.log)
            tail = [line[:300] for line in (log.read_text(errors="replace") if log.exists() else "").splitlines()
                    if said.search(line)][-15:]
            running = "running" if daemon.process() is not None else "NOT running"
            lines.append(f"{daemon.name} ({running}), {log}:\n  " + "\n  ".join(tail))
    return "\n".join(lines)


def wait_for_rms(launcher: LocalCluster, predicate, what: str, timeout: float = 120):
    return wait_for(predicate, timeout, what, explain=lambda: rms_explained(launcher))


@pytest.fixture
def both_rms_back(cluster, launcher):
    """Whatever a test did to the RMs and ZooKeeper, all run again afterwards, one of them active."""
    yield
    for name in ("zookeeper", "resourcemanager1", "resourcemanager2"):
        launcher.restart_daemon(name)
    webs = launcher.load_state().rm_webs
    wait_for_rms(launcher, lambda: availability.active_rm_web(webs), "an active ResourceManager")


def active_rm_daemon(launcher: LocalCluster) -> str:
    """The daemon name of the active RM (rm2 -> resourcemanager2), waiting for one to be active."""
    webs = launcher.load_state().rm_webs
    rm_id = wait_for_rms(launcher, lambda: next((rm for rm, s in availability.ha_states(webs).items()
                                                  if s == "ACTIVE"), None), "an active ResourceManager")
    return availability.rm_daemon(rm_id)
