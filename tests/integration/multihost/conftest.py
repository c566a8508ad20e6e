"""The multi-host tests' cluster: every daemon its own host (tony_py/cluster/docker.py), three
NodeManagers, started once for these tests (and stopped after them) by the same launcher users run
(`tony cluster up --docker`). Here `cluster` is that cluster, so the parent conftest's fixtures
(`tony`, `probe_args`, the leftover check) work on it unchanged.

Without a Docker engine these tests are skipped with the one-line reason, except where
TONY_TEST_DOCKER=required (CI): there a missing engine fails the session.
pytest-docker is not used: its fixture drives `docker compose`, which Debian bookworm packages
only as the end-of-life v1, and a compose file cannot express what the launcher does per
cluster (a free /24, the host's Python at the same path, faults on one container).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from support import ROOT, Cluster, need_docker_engine
from tony_py.cluster.docker import DockerCluster
from tony_py.cluster.faults import Faults

NODES = 3


@pytest.fixture(scope="package")  # down again before the rest of the suite: its 2 cores are shared
def cluster(request) -> Cluster:
    need_docker_engine("the multi-host cluster")
    workdir = ROOT / ".test-docker-cluster"
    launcher = DockerCluster(workdir)
    launcher.down(purge=True)  # whatever an aborted earlier session left
    state, _ = launcher.up(nodes=NODES, timeout=300, log=lambda line: print(f"\n[docker cluster] {line}",
                                                                             file=sys.stderr))
    print(f"\n[docker cluster] up in {state.up_seconds} s", file=sys.stderr)
    yield Cluster("docker", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir), workdir,
                  state.nodemanagers, launcher=launcher)
    failed = request.session.testsfailed
    launcher.down(purge=not failed)
    if failed:
        print(f"\n[docker cluster] {failed} test(s) failed: logs kept in {workdir}", file=sys.stderr)


@pytest.fixture
def faults(cluster) -> Faults:
    """Break nodes; whatever a test leaves broken is reported as its failure and repaired."""
    faults = Faults(cluster.launcher)
    yield faults
    left = faults.damage()
    if left:
        faults.repair()
    assert not left, f"the test left the cluster damaged: {left}"
