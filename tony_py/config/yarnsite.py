"""What a client or an AM reads of the cluster's own yarn-site.xml (HADOOP_CONF_DIR): where the
ResourceManagers' web UIs are, and the sizes YARN grants containers in."""

from __future__ import annotations

import os
from pathlib import Path

from tony_py.config.xmlconf import read_xml
from tony_py.errors import UsageError

MIN_ALLOCATION_KEY = "yarn.scheduler.minimum-allocation-mb"
HADOOP_MIN_ALLOCATION_MB = 1024  # Hadoop's default for the key
MAX_ALLOCATION_KEY = "yarn.scheduler.maximum-allocation-mb"


def yarn_site(conf_dir: str | None = None) -> dict[str, str]:
    conf_dir = conf_dir or os.environ.get("HADOOP_CONF_DIR") or "/etc/hadoop/conf"
    site = Path(conf_dir) / "yarn-site.xml"
    try:
        return read_xml(site) if site.is_file() else {}
    except (UsageError, OSError):
        return {}


def rm_web_urls(conf_dir: str | None = None) -> list[str]:
    """The ResourceManager web addresses from yarn-site.xml (every RM of an HA pair)."""
    conf = yarn_site(conf_dir)
    https = conf.get("yarn.http.policy") == "HTTPS_ONLY"
    key = "yarn.resourcemanager.webapp.https.address" if https else "yarn.resourcemanager.webapp.address"
    port = 8090 if https else 8088
    ids = [i.strip() for i in conf.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()] \
        if conf.get("yarn.resourcemanager.ha.enabled") == "true" else [""]
    urls = []
    for rm in ids:
        suffix = f".{rm}" if rm else ""
        address = conf.get(key + suffix) or \
            f"{conf.get('yarn.resourcemanager.hostname' + suffix, 'localhost')}:{port}"
        urls.append(f"{'https' if https else 'http'}://{address.replace('0.0.0.0', 'localhost')}")
    return urls


def rm_rpc_addresses(conf_dir: str | None = None) -> list[tuple[str, str]]:
    """(host:port, the key that says so) of every ResourceManager's client RPC address, as
    yarn-site.xml gives it (both of an HA pair), Hadoop's defaults where it is silent."""
    conf = yarn_site(conf_dir)
    ids = [i.strip() for i in conf.get("yarn.resourcemanager.ha.rm-ids", "").split(",") if i.strip()] \
        if conf.get("yarn.resourcemanager.ha.enabled") == "true" else [""]
    out = []
    for rm in ids:
        suffix = f".{rm}" if rm else ""
        key = "yarn.resourcemanager.address" + suffix
        host = conf.get("yarn.resourcemanager.hostname" + suffix) or conf.get("yarn.resourcemanager.hostname", "0.0.0.0")
        address = conf.get(key) or f"{host}:8032"
        address = address.replace("${yarn.resourcemanager.hostname}", host).replace("0.0.0.0", "localhost")
        out.append((address, key if conf.get(key) else f"yarn.resourcemanager.hostname{suffix}"))
    return out


def allocation_limits(conf_dir: str | None = None) -> tuple[int, int | None]:
    """YARN's allocation increment (yarn.scheduler.minimum-allocation-mb; Hadoop's default 1024
    where yarn-site.xml lacks it, as a client's often does): the scheduler rounds every container
    up to a multiple of it; and its largest container (yarn.scheduler.maximum-allocation-mb),
    None where yarn-site.xml does not say."""
    site = yarn_site(conf_dir)

    def positive(key: str) -> int | None:
        try:
            value = int(site.get(key) or 0)
        except ValueError:
            return None
        return value if value > 0 else None

    return positive(MIN_ALLOCATION_KEY) or HADOOP_MIN_ALLOCATION_MB, positive(MAX_ALLOCATION_KEY)


def queue_room(conf_dir: str | None = None, timeout: float = 5.0) -> tuple[tuple[str, int], ...]:
    """(leaf queue, MB it could still take) now, from the ResourceManager's REST API: the cluster's
    memory times the queue's maximum share, less what it uses. () where no RM answers (down, or
    without the user's Kerberos ticket behind SPNEGO): the advice then names no queue."""
    import requests

    from tony_py import spnego

    http = spnego.session()
    for url in rm_web_urls(conf_dir):
        try:
            total = http.get(f"{url}/ws/v1/cluster/metrics", timeout=timeout).json()["clusterMetrics"]["totalMB"]
            root = http.get(f"{url}/ws/v1/cluster/scheduler", timeout=timeout).json()["scheduler"]["schedulerInfo"]
        except (requests.RequestException, ValueError, KeyError, TypeError):
            continue
        return tuple((q["queueName"], int(total * q.get("absoluteMaxCapacity", 100) / 100
                                          - (q.get("resourcesUsed") or {}).get("memory", 0)))
                     for q in _leaves(root))
    return ()


def _leaves(queue: dict) -> list[dict]:
    children = ((queue.get("queues") or {}).get("queue")) or []
    return [leaf for child in children for leaf in _leaves(child)] if children else [queue] if "queueName" in queue else []
