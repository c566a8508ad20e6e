"""The core of the suite on the compatibility lane's cluster (conftest.py: an older Hadoop
release, every JVM on Java 11): the very tests the one-host lane runs, imported here so that
they run again against this cluster (pytest collects them in this module, where `cluster` is
the compat one). A test of this lane's own checks that the cluster really is that release and
that the AM really ran on Java 11."""

from __future__ import annotations

from pathlib import Path

import psutil

from compat.conftest import COMPAT_HADOOP
from support import Background, am_processes, wait_for
from test_failures import (nodemanager2_back,  # noqa: F401
                           test_killed_worker_restarts_in_place_and_resumes_from_checkpoint,
                           test_lost_nodemanager_job_finishes_on_the_other_node)
from test_job_semantics import test_pytorch_environment, test_tensorflow_environment  # noqa: F401
from test_observability import test_history_logs_and_portal_after_a_failed_job  # noqa: F401

CORE = {  # what this lane proves, by the imported tests' names (the census counts them)
    "submit and TonY's task environment": (test_tensorflow_environment, test_pytorch_environment),
    "a restart after a kill": (test_killed_worker_restarts_in_place_and_resumes_from_checkpoint,),
    "a node loss": (test_lost_nodemanager_job_finishes_on_the_other_node,),
    "history and logs": (test_history_logs_and_portal_after_a_failed_job,),
}


def test_the_cluster_runs_that_release_and_the_am_runs_on_java_11(cluster, probe_args):
    info = cluster.http.get(f"{cluster.rm()}/ws/v1/cluster/info", timeout=10).json()["clusterInfo"]
    assert info["hadoopVersion"] == COMPAT_HADOOP and info["resourceManagerVersion"] == COMPAT_HADOOP, info
    job = Background(cluster, probe_args("tony.worker.instances=1", params="--sleep worker:0:30"))
    try:
        ams = wait_for(lambda: job.app_id and am_processes(job.app_id), 120, "the job's AM to run")
        java = Path(ams[0].exe()).resolve()
        assert java.is_relative_to(Path(cluster.java_home).resolve()), java
        assert _java_major(ams[0]) == 11
        home = f"-Dhadoop.home.dir={cluster.workdir}"  # every daemon of this cluster (definition.java_command)
        daemons = [p for p in psutil.process_iter(["cmdline"]) if home in (p.info["cmdline"] or [])]
        assert len(daemons) >= 5 and all(Path(p.exe()).resolve().is_relative_to(Path(cluster.java_home).resolve())
                                         for p in daemons), [p.exe() for p in daemons]
    finally:
        run = job.wait(timeout=300)
    assert run.rc == 0, run.output[-3000:]


def _java_major(proc: psutil.Process) -> int:
    """The Java major version of a running JVM, from its runtime's release file."""
    home = Path(proc.exe()).resolve().parents[1]
    for line in (home / "release").read_text().splitlines():
        if line.startswith("JAVA_VERSION="):
            return int(line.split("=", 1)[1].strip('"').split(".")[0])
    raise AssertionError(f"{home}/release names no JAVA_VERSION")


def test_the_core_is_here():
    """The imported tests are this module's own (a rename in their modules breaks this loudly)."""
    here = globals()
    assert all(here.get(test.__name__) is test for tests in CORE.values() for test in tests)
