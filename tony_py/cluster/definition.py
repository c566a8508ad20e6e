"""The one definition of the local test cluster, whichever launcher starts it.

Both launchers (every daemon a process on this machine: processes.py; every daemon a container
with its own host name and address: docker.py) render the same templates from
docker/hadoop-cluster/conf/, start each daemon with the same JVM command line, and call the
cluster ready by the same test (HDFS out of safe mode with a live DataNode, every NodeManager
RUNNING in the ResourceManager's REST API). What differs between them is only the values:
host names, ports, directories and YARN's liveness timers.
"""

from __future__ import annotations

import json
import shutil
import string
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import requests

from tony_py import paths, spnego
from tony_py.bridge import jvm
from tony_py.errors import SetupError

TEMPLATES = paths.CLUSTER_DEFINITION_DIR / "conf"
CONF_FILES = ("core-site.xml", "hdfs-site.xml", "yarn-site.xml", "capacity-scheduler.xml")
STATE_FILE = "cluster.json"

MAIN_CLASS = {
    "zookeeper": "org.apache.zookeeper.server.ZooKeeperServerMain",
    "namenode": "org.apache.hadoop.hdfs.server.namenode.NameNode",
    "datanode": "org.apache.hadoop.hdfs.server.datanode.DataNode",
    "resourcemanager": "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager",
    "nodemanager": "org.apache.hadoop.yarn.server.nodemanager.NodeManager",
}
# Heap per daemon: together (with JVM overhead) well under 4 GB of RSS.
HEAP_MB = {"zookeeper": 64, "namenode": 256, "datanode": 192, "resourcemanager": 384, "nodemanager": 256}
NM_MEMORY_MB = 12288
NM_VCORES = 16
STANDIN_GPUS = 2  # what docker/hadoop-cluster/gpu/nvidia-smi reports

PORT_NAMES = (
    "nn_rpc_port nn_http_port dn_data_port dn_http_port dn_ipc_port "
    "rm_port rm_scheduler_port rm_tracker_port rm_admin_port rm_web_port"
).split()
NM_PORT_NAMES = ("nm_port", "nm_localizer_port", "nm_web_port", "nm_collector_port")


@dataclass(frozen=True)
class Timers:
    """YARN's liveness timers for the cluster (Hadoop's defaults are 10 min, 10 min and 15 min:
    a test would wait that long for YARN to notice a fault)."""

    nm_expiry_ms: int  # a NodeManager silent this long is LOST; its containers are reported ended
    am_expiry_ms: int  # an AM attempt silent this long is failed; the next attempt starts
    rm_connect_max_wait_ms: int  # how long a client keeps retrying an unreachable RM (the AM: at least its expiry)
    # How long a NodeManager does: it shuts itself down after that, so an RM restart or a ZooKeeper
    # outage longer than it would take every node with it. Production's 15 min (Hadoop's default).
    nm_rm_connect_max_wait_ms: int = 900_000

    def values(self) -> dict[str, int]:
        return dict(self.__dict__)


def daemon_kind(name: str) -> str:
    """'nodemanager2' -> 'nodemanager', 'resourcemanager1' -> 'resourcemanager' (an HA pair);
    the other daemons are named by their kind."""
    return name.rstrip("0123456789")



def render(template: Path, values: dict) -> str:
    try:
        return string.Template(template.read_text()).substitute(values)
    except KeyError as exc:
        raise SetupError(f"{template}: no value for placeholder {exc}") from exc


def gpu_properties(nm: dict) -> str:
    """A GPU NodeManager runs YARN's GPU plugin (discovery through nvidia-smi); the others count
    none. Under the DefaultContainerExecutor the plugin discovers and counts, it does not
    isolate: which device is whose is the AM's to decide (docs/architecture.md, GPUs)."""
    if not nm.get("gpu_discovery"):
        return "  <property><name>yarn.nodemanager.resource-type.yarn.io/gpu</name><value>0</value></property>"
    props = {
        "yarn.nodemanager.resource-plugins": "yarn.io/gpu",
        "yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices": "auto",
        # the directory that holds nvidia-smi, as Dataproc configures it: Hadoop 3.3.x's
        # GpuDiscoverer refuses a file path whose name IS nvidia-smi (its name check is inverted:
        # "It should point to an nvidia-smi binary"), and every version takes the directory
        "yarn.nodemanager.resource-plugins.gpu.path-to-discovery-executables": gpu_discovery_dir(nm["gpu_discovery"]),
    }
    return "\n".join(f"  <property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())


def gpu_discovery_dir(binary: str) -> str:
    path = Path(binary)
    if path.name != "nvidia-smi":
        raise ValueError(f"YARN's GPU discovery runs a binary named nvidia-smi, not {binary}")
    return str(path.parent)


def install_standin(target_dir: Path) -> Path:
    """The stand-in nvidia-smi (two devices) that YARN's GPU plugin discovers on a machine
    without NVIDIA GPUs, as Hadoop's own tests do. Copied: a NodeManager puts its directory
    first on its containers' PATH, for metrics."""
    target = target_dir / "nvidia-smi"
    target_dir.mkdir(parents=True, exist_ok=True)
    shutil.copy(paths.CLUSTER_DEFINITION_DIR / "gpu" / "nvidia-smi", target)
    target.chmod(0o755)
    return target


def write_conf_dir(target: Path, values: dict) -> None:
    target.mkdir(parents=True, exist_ok=True)
    for name in CONF_FILES:
        (target / name).write_text(render(TEMPLATES / name, values))
    shutil.copy(TEMPLATES / "log4j.properties", target / "log4j.properties")


def write_nodemanager_conf(target: Path, values: dict, nm: dict) -> None:
    """The cluster's conf plus one NodeManager's own settings (host, ports, dirs, GPUs)."""
    nm_values = dict(values, **{k if k.startswith("nm_") else f"nm_{k}": v for k, v in nm.items()})
    nm_values["rm_connect_max_wait_ms"] = values["nm_rm_connect_max_wait_ms"]
    nm_values["nm_gpu_properties"] = gpu_properties(nm)
    nm_values["daemon_properties"] = render(TEMPLATES / "nodemanager.xml", nm_values)
    write_conf_dir(target, nm_values)


def java_command(java: str, daemon: str, conf_dir: str, lib_dir: str, log_dir: str, log_name: str,
                 home: str, user: str) -> list[str]:
    """How every daemon JVM starts, on this machine or in a container."""
    return [
        java,
        f"-Xmx{HEAP_MB[daemon]}m",
        "-XX:MaxMetaspaceSize=160m",
        "-XX:ReservedCodeCacheSize=48m",
        "-XX:CICompilerCount=2",
        *jvm.FAST_START_OPTS,
        *jvm.JDK17_OPENS,
        f"-Dhadoop.log.dir={log_dir}",
        f"-Dyarn.log.dir={log_dir}",
        f"-Dhadoop.log.file={log_name}",
        f"-Dhadoop.home.dir={home}",
        "-Dhadoop.id.str=" + user,
        "-cp",
        f"{conf_dir}:{lib_dir}/*",
        MAIN_CLASS[daemon],
    ]


NAMENODE_FORMAT_ARGS = ("-format", "-force", "-nonInteractive", "-clusterid", "tony-py-local")


# ---- state ----------------------------------------------------------------------------------------
def read_state(path: Path, cls):
    try:
        return cls.from_json(json.loads(path.read_text()))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError) as exc:
        raise SetupError(f"{path} is unreadable ({exc}); remove it") from exc


def save_state(path: Path, state) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state.to_json(), indent=2))
    tmp.replace(path)


def overall_state(alive: dict[str, bool]) -> str:
    if alive and all(alive.values()):
        return "running"
    return "degraded" if any(alive.values()) else "down"


# ---- ready -------------------------------------------------------------------------------------
def hdfs_ready(nn_web: str, http=requests) -> tuple[bool, str]:
    url = f"{nn_web}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"
    beans = http.get(url, timeout=2).json().get("beans") or [{}]
    info = beans[0]
    live = json.loads(info.get("LiveNodes") or "{}")
    safemode = info.get("Safemode", "?")
    if live and safemode == "":
        return True, ""
    return False, f"HDFS: {len(live)} live DataNode(s), safe mode: {safemode or 'off'}"


def running_nodes(rm_web: str, http=requests) -> list[dict]:
    resp = http.get(f"{rm_web}/ws/v1/cluster/nodes", timeout=2)
    nodes = ((resp.json().get("nodes") or {}).get("node")) or []
    return [n for n in nodes if n.get("state") == "RUNNING"]


def yarn_ready(rm_web: str, want: int, http=requests) -> tuple[bool, str]:
    running = running_nodes(rm_web, http)
    if len(running) >= want:
        return True, ""
    return False, f"YARN: {len(running)}/{want} NodeManagers RUNNING"


def wait_answering(url: str, deadline: float, what: str, http=requests) -> None:
    """Until a daemon's own web endpoint answers 200."""
    while time.monotonic() < deadline:
        try:
            if http.get(url, timeout=2).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(0.25)
    raise SetupError(f"{what} did not answer at {url} in time")


def wait_ready(dead: Callable[[], list[str]], rm_web: str | Callable[[], str | None], nn_web: str, nodemanagers: int,
               deadline: float, logs: Path, http=requests) -> None:
    """Until HDFS and YARN answer ready; fails at once if a daemon died (dead() names them).
    rm_web: the RM's web address, or (an HA pair) a function that finds the active one's, or None.
    http: what asks them (requests, or a spnego.Session on a cluster whose web UIs want Kerberos)."""
    hdfs = yarn = False
    last = ""
    while time.monotonic() < deadline:
        gone = dead()
        if gone:
            raise SetupError(f"{', '.join(gone)} exited during start; see {logs}")
        try:
            if not hdfs:
                hdfs, last = hdfs_ready(nn_web, http)
            if not yarn:
                active = rm_web() if callable(rm_web) else rm_web
                if active is None:
                    yarn, last = False, "YARN: no ResourceManager is active yet"
                else:
                    yarn, last = yarn_ready(active, nodemanagers, http)
        except spnego.SpnegoError as exc:  # credentials do not come by waiting
            raise SetupError(f"the cluster's web endpoints refused the launcher: {exc}") from exc
        except (requests.RequestException, ValueError) as exc:
            last = f"waiting for web endpoints ({exc.__class__.__name__})"
        if hdfs and yarn:
            return
        time.sleep(0.25)
    raise SetupError(f"the cluster did not become ready in time: {last}")


def check_running_matches(workdir, existing, kerberos: bool, ha: bool, hadoop_version: str | None) -> None:
    """`up` on a workdir whose cluster runs already: refused if it was started otherwise."""
    for wanted, has, what in ((kerberos, bool(existing.kerberos), "Kerberos (--secure)"),
                              (ha, bool(existing.ha), "two ResourceManagers (--ha)"),
                              (hadoop_version or existing.hadoop_version, existing.hadoop_version, "Hadoop")):
        if wanted != has:
            running = f"Hadoop {has}, not {wanted}" if what == "Hadoop" else f"{'with' if has else 'without'} {what}"
            raise SetupError(f"the cluster in {workdir} is running {running}; run `tony cluster down` first, "
                             "or give another --workdir")
