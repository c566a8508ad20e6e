"""Integration fixtures: one real YARN + HDFS cluster for the whole test session.

`cluster` is, in order:
- TONY_TEST_HADOOP_CONF_DIR: an already running cluster (its client conf dir);
- otherwise the process launcher (tony_py.cluster): NameNode, DataNode, ResourceManager and
  two NodeManagers as separate JVMs on this machine, all on 127.0.0.1. Under pytest-xdist each
  worker that runs such tests has a cluster of its own (.test-cluster-gw0, …), so its tests
  still run one at a time on their cluster and the leftover check below stays exact. The GPU
  NodeManager discovers this machine's GPUs with its own nvidia-smi where one answers, else
  two stand-in devices.
Tests about nodes, addresses and faults live in tests/integration/multihost/, whose conftest
makes `cluster` the Docker cluster instead (every daemon its own host), started once per session
too. Daemon logs are kept (and their path printed) when any test failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from cluster_start import start_or_say_why
from support import JOBS, PYTHON, ROOT, Cluster, Run, app_id_in, clean_up, finish, wait_clean, worker_suffix
from tony_py.cluster import LocalCluster


@pytest.fixture(scope="session")
def cluster(request) -> Cluster:
    external = os.environ.get("TONY_TEST_HADOOP_CONF_DIR")
    if external:
        from tony_py.config.xmlconf import read_xml

        yarn = read_xml(Path(external) / "yarn-site.xml")
        hdfs = read_xml(Path(external) / "hdfs-site.xml")
        from tony_py.cluster.jars import ensure_hadoop_jars

        yield Cluster("external", Path(external), "http://" + yarn["yarn.resourcemanager.webapp.address"],
                      "http://" + hdfs["dfs.namenode.http-address"], Path(ensure_hadoop_jars()))
        return
    workdir = ROOT / f".test-cluster{worker_suffix()}"
    launcher = LocalCluster(workdir)
    launcher.down(purge=True)  # whatever an aborted earlier session left
    state, _ = start_or_say_why("the one-host cluster", lambda: launcher.up(timeout=240), workdir)
    print(f"\n[cluster] up in {state.up_seconds} s: {launcher.status().get('daemon_rss_mb')}", file=sys.stderr)
    handle = Cluster("processes", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir),
                     workdir, state.nodemanagers)
    yield handle
    failed = request.session.testsfailed
    launcher.down(purge=not failed)
    if failed:
        print(f"\n[cluster] {failed} test(s) failed: daemon and container logs kept in {workdir}", file=sys.stderr)


# ---- running the real CLI ------------------------------------------------------------------------
@pytest.fixture
def tony(cluster):
    """Run `python -m tony_py.submit ARGS` (the real CLI) against the test cluster."""

    def run(*args: str, timeout: float = 300, env: dict | None = None) -> Run:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            proc = subprocess.Popen([PYTHON, "-m", "tony_py.submit", *args], stdout=out, stderr=err, text=True,
                                    env=cluster.env(**(env or {})), cwd=ROOT)
            finish(proc, timeout)
            out.seek(0)
            err.seek(0)
            stdout, stderr = out.read(), err.read()
        return Run(proc.returncode, stdout, stderr, app_id_in(stdout))

    return run


@pytest.fixture
def probe_args(tmp_path):
    """The flags of a job that runs jobs/probe.py with the test's python, writing into tmp_path."""

    def args(*conf: str, params: str = "", framework: str = "tensorflow") -> list[str]:
        out = ["--src_dir", str(JOBS), "--executes", "probe.py", "--python_binary_path", PYTHON,
               "--task_params", f"--out {tmp_path / 'probe'} {params}".strip(),
               "--conf", f"tony.application.framework={framework}", "--conf", "tony.am.memory=512m"]
        for c in conf:
            out += ["--conf", c]
        return out

    return args


# ---- nothing left behind ---------------------------------------------------------------------------
@pytest.fixture(autouse=True)
def nothing_left_behind(request, cluster):
    """After every integration test: no running application, no staging dir, no stray process.
    What one test leaves is reported as its failure and then removed, so the next test is
    judged on its own (one leak must not turn into an error for every later test)."""
    yield
    left = wait_clean(cluster)
    if any(left.values()):
        clean_up(cluster, left)
    assert not any(left.values()), f"left behind: {left}"
