"""Before a job touches the cluster: is there one, and is it one TonY-py runs on? Two cheap
looks, so that a wrong HADOOP_CONF_DIR or an old cluster is one line and exit 2 with nothing
created, not a Hadoop client retrying for minutes (its default patience for a ResourceManager
is 15 minutes) or an AM that fails on the cluster's older API:

- the ResourceManagers' RPC addresses from yarn-site.xml: at least one must accept a connection
  (of an HA pair, within the time the client would wait on its RMs anyway: see _one_accepts);
- the RM's /ws/v1/cluster/info: its Hadoop release must be hadoop_support.OLDEST or newer. Where
  the web UI does not answer (another port closed, SPNEGO without the kerberos extra, HTTPS with
  an unknown CA) the release is not known and the submit goes on: the RPC check is what gates.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from tony_py import hadoop_support
from tony_py.config import yarnsite
from tony_py.errors import SetupError

CONNECT_TIMEOUT_S = 5.0
RM_WAIT_KEY = "yarn.resourcemanager.connect.max-wait.ms"
RM_WAIT_DEFAULT_MS = 120_000  # the client JVM's, where yarn-site.xml is silent (bridge/gateway.py's RM_CONNECT)


def check_cluster(conf_dir: Path) -> str | None:
    """SetupError (exit 2) when no RM answers, UsageError (exit 2) for a cluster older than
    TonY-py supports; otherwise the cluster's Hadoop release, where its RM said."""
    addresses = yarnsite.rm_rpc_addresses(str(conf_dir))
    if not _one_accepts(addresses, conf_dir):
        where = ", ".join(f"{address} ({key})" for address, key in addresses)
        raise SetupError(f"no ResourceManager answers at {where} in {conf_dir / 'yarn-site.xml'}: start it, or "
                         "point HADOOP_CONF_DIR at your cluster's client configuration")
    for url in yarnsite.rm_web_urls(str(conf_dir)):
        version = _release(url)
        if version:
            hadoop_support.check_supported(version, f"the cluster at {url}")
            return version
    return None


def _one_accepts(addresses: list[tuple[str, str]], conf_dir: Path) -> bool:
    """One look at a lone ResourceManager. An HA pair is looked at again while it may be failing
    over, for as long as the client would wait on its RMs (yarn.resourcemanager.connect.max-wait.ms):
    then neither takes a connection, the standby opening its client port only once active. (The HA
    test that kills the active RM as a client starts had the client refuse the cluster, exit 2.)"""
    try:
        wait_s = int(yarnsite.yarn_site(str(conf_dir)).get(RM_WAIT_KEY) or RM_WAIT_DEFAULT_MS) / 1000
    except ValueError:  # Hadoop's own client refuses it later, saying so
        wait_s = RM_WAIT_DEFAULT_MS / 1000
    deadline = time.monotonic() + (wait_s if len(addresses) > 1 else 0.0)
    while not any(_accepts(address) for address, _ in addresses):
        if time.monotonic() >= deadline:
            return False
        time.sleep(1.0)
    return True


def _accepts(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S):
            return True
    except (OSError, ValueError):
        return False


def _release(url: str) -> str | None:
    import requests

    from tony_py import spnego

    try:
        info = spnego.session().get(f"{url}/ws/v1/cluster/info", timeout=CONNECT_TIMEOUT_S).json()["clusterInfo"]
        return info.get("resourceManagerVersion") or info.get("hadoopVersion")
    except (requests.RequestException, ValueError, KeyError, TypeError):
        return None
