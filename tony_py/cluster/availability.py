"""The ResourceManagers' availability, as production runs them, for both launchers: work-preserving
recovery on every local cluster (a lone RM's state in LevelDB), and with `--ha` a pair of RMs
(rm1, rm2) that elect the active one through a ZooKeeper of their own, which also keeps their
state. What the launchers render (the RMs' properties, each RM's and ZooKeeper's own conf), how
they check it (ZooKeeper's `srvr`, each RM's HA state) and what `status --json` says of it.
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path

import requests

from tony_py.cluster.definition import TEMPLATES, write_conf_dir

# Each ResourceManager's addresses: the port names above and the yarn-site keys an HA pair sets per RM id.
RM_ADDRESS_KEYS = {"rm_port": "yarn.resourcemanager.address",
                   "rm_scheduler_port": "yarn.resourcemanager.scheduler.address",
                   "rm_tracker_port": "yarn.resourcemanager.resource-tracker.address",
                   "rm_admin_port": "yarn.resourcemanager.admin.address",
                   "rm_web_port": "yarn.resourcemanager.webapp.address"}
HA_RM_IDS = ("rm1", "rm2")
HA_CLUSTER_ID = "tony-py-local"
# The RMs' ZooKeeper session: a killed active RM's leadership lock lasts this long, so it is most
# of a fail-over's time (Hadoop's default 10 s); ZooKeeper grants at most 20 ticks.
ZK_SESSION_MS = 6000
ZK_TICK_MS = 1000


def rm_daemon(rm_id: str) -> str:
    """The daemon name of an HA pair's RM: rm1 -> resourcemanager1."""
    return "resourcemanager" + rm_id.removeprefix("rm")


def _properties(props: dict[str, object]) -> str:
    return "\n".join(f"  <property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())


def resourcemanager_properties(data_dir: str, rms: list[dict] | None = None, zookeeper: str | None = None,
                               recovery: bool = True) -> str:
    """Work-preserving RM recovery on every local cluster, as production runs it: a restarted
    ResourceManager (or the other of an HA pair) takes the running applications and their
    containers back. A lone RM keeps its state in LevelDB on its own disk; an HA pair (rms: each
    {"id", "host", <RM_ADDRESS_KEYS' port names>}) in ZooKeeper, which also elects the active one."""
    if not recovery:  # (bench/maintenance.py's baseline: what a cluster without it does to a job)
        return _properties({"yarn.resourcemanager.recovery.enabled": "false"})
    props: dict[str, object] = {
        "yarn.resourcemanager.recovery.enabled": "true",
        "yarn.resourcemanager.work-preserving-recovery.enabled": "true",
    }
    if not rms:
        props.update({
            "yarn.resourcemanager.store.class":
                "org.apache.hadoop.yarn.server.resourcemanager.recovery.LeveldbRMStateStore",
            "yarn.resourcemanager.leveldb-state-store.path": f"{data_dir}/resourcemanager/state"})
        return _properties(props)
    props.update({
        "yarn.resourcemanager.store.class": "org.apache.hadoop.yarn.server.resourcemanager.recovery.ZKRMStateStore",
        "hadoop.zk.address": zookeeper,
        "hadoop.zk.timeout-ms": ZK_SESSION_MS,
        "yarn.resourcemanager.ha.enabled": "true",
        "yarn.resourcemanager.ha.automatic-failover.enabled": "true",
        "yarn.resourcemanager.ha.automatic-failover.embedded": "true",
        "yarn.resourcemanager.cluster-id": HA_CLUSTER_ID,
        "yarn.resourcemanager.ha.rm-ids": ",".join(rm["id"] for rm in rms),
    })
    for rm in rms:
        props[f"yarn.resourcemanager.hostname.{rm['id']}"] = rm["host"]
        for port, key in RM_ADDRESS_KEYS.items():
            props[f"{key}.{rm['id']}"] = f"{rm['host']}:{rm[port]}"
    return _properties(props)


def write_resourcemanager_conf(target: Path, values: dict, rm: dict) -> None:
    """An HA pair's RM: the cluster's conf with its own host (it binds there) plus which of the
    pair it is (both may share a host, where YARN could not tell them apart by address)."""
    write_conf_dir(target, dict(values, rm_host=rm["host"],
                                daemon_properties=_properties({"yarn.resourcemanager.ha.id": rm["id"]})))


def write_zookeeper_conf(target: Path, host: str, port: int, data_dir: str) -> Path:
    """A standalone ZooKeeper for an HA pair: on its own address only, its admin web server off,
    the four-letter `srvr` kept (its readiness check)."""
    target.mkdir(parents=True, exist_ok=True)
    cfg = target / "zoo.cfg"
    cfg.write_text("\n".join([
        f"tickTime={ZK_TICK_MS}", f"maxSessionTimeout={20 * ZK_TICK_MS}", f"dataDir={data_dir}",
        f"clientPort={port}", f"clientPortAddress={host}", "admin.enableServer=false",
        "4lw.commands.whitelist=srvr", "autopurge.purgeInterval=1", ""]))
    shutil.copy(TEMPLATES / "log4j.properties", target / "log4j.properties")
    return cfg


def zookeeper_ready(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2) as sock:
            sock.sendall(b"srvr")
            return b"Mode:" in sock.recv(4096)
    except OSError:
        return False


def ha_states(rm_webs: dict[str, str], timeout: float = 2.0) -> dict[str, str]:
    """{rm id: ACTIVE | STANDBY | ... | DOWN} from each RM's /ws/v1/cluster/info (which a standby
    answers itself rather than redirecting)."""
    out = {}
    for rm_id, url in rm_webs.items():
        try:
            out[rm_id] = requests.get(f"{url}/ws/v1/cluster/info", timeout=timeout).json()["clusterInfo"]["haState"]
        except (requests.RequestException, ValueError, KeyError, TypeError):
            out[rm_id] = "DOWN"
    return out


def ha_status(rm_webs: dict[str, str], ha: dict | None) -> dict:
    """`status --json`'s view of the ResourceManagers: every RM's web address, which is active,
    and (an HA pair) their ids and ZooKeeper. A lone RM has no id: rm_ids is empty."""
    if not ha:
        return {"rm_ids": [], "active_rm": None, "rm_web_addresses": list(rm_webs.values()), "zookeeper": None}
    states = ha_states(rm_webs, timeout=1.0)
    return {"rm_ids": list(rm_webs), "active_rm": next((rm for rm, s in states.items() if s == "ACTIVE"), None),
            "rm_states": states, "rm_web_addresses": list(rm_webs.values()), "zookeeper": ha["zookeeper"]}


def active_rm_web(rm_webs: dict[str, str]) -> str | None:
    """The web address of the active RM of a pair, None while none is."""
    return next((rm_webs[rm] for rm, state in ha_states(rm_webs).items() if state == "ACTIVE"), None)


def forget_running_state(data: Path) -> None:
    """A cluster that starts afresh starts with no running applications: what the RMs and the
    NodeManagers kept to recover (recovery is for restarting a daemon of a running cluster)
    goes; HDFS's data stays."""
    for path in [data / "resourcemanager" / "state", data / "zookeeper", *data.glob("nm*/recovery")]:
        shutil.rmtree(path, ignore_errors=True)
