"""The processes a launcher started on this machine (daemons, the KDC): which live process a
recorded pid still is, and stopping several at once; and the process cluster's record of them
(ClusterState, its cluster.json): ports, dirs, options, and each daemon's own conf dir."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tony_py.cluster import availability, definition

HOST = "127.0.0.1"

KIND = "processes"


@dataclass
class DaemonState:
    name: str
    pid: int
    create_time: float
    log: str

    def process(self) -> psutil.Process | None:
        """The live process this entry describes, or None (gone, or pid reused)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > 1.0:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None


def kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


@dataclass
class ClusterState:
    workdir: str
    hadoop_version: str
    conf_dir: str
    lib_dir: str
    ports: dict[str, int]
    nodemanagers: list[dict]
    daemons: list[DaemonState] = field(default_factory=list)
    up_seconds: float | None = None
    kind: str = KIND
    # A secure cluster (up --secure): {"krb5_conf", "keytabs": {"services"|user: path},
    # "lifetimes": {...}}; None on an insecure one.
    kerberos: dict | None = None
    # An HA pair (up --ha): {"zookeeper": "host:port", "zk_port": int, "rms": [{"id", "host", <port names>}]}.
    ha: dict | None = None
    java_home: str | None = None  # what the daemons and their containers run on (up's java_home)

    @property
    def rm_webs(self) -> dict[str, str]:
        """{rm id: web address}: both of an HA pair, else the lone RM's (id "rm")."""
        if self.ha:
            return {rm["id"]: f"http://{rm['host']}:{rm['rm_web_port']}" for rm in self.ha["rms"]}
        return {"rm": f"http://{HOST}:{self.ports['rm_web_port']}"}

    @property
    def rm_web(self) -> str:
        """The (first) RM's web address: an HA pair's standby redirects to the active one."""
        return next(iter(self.rm_webs.values()))

    @property
    def resourcemanagers(self) -> list[str]:
        """The RM daemons' names."""
        return [availability.rm_daemon(rm["id"]) for rm in self.ha["rms"]] if self.ha else ["resourcemanager"]

    @property
    def nn_web(self) -> str:
        return f"http://{HOST}:{self.ports['nn_http_port']}"

    @property
    def default_fs(self) -> str:
        return f"hdfs://{HOST}:{self.ports['nn_rpc_port']}"

    def to_json(self) -> dict:
        data = dict(self.__dict__)
        data["daemons"] = [d.__dict__ for d in self.daemons]
        return data

    @classmethod
    def from_json(cls, data: dict) -> "ClusterState":
        data = dict(data)
        data["daemons"] = [DaemonState(**d) for d in data.get("daemons", [])]
        return cls(**data)


def own_conf_dir(state: ClusterState, name: str, nm: dict | None) -> str:
    """The conf dir a daemon starts with: a NodeManager's, an HA RM's or ZooKeeper's own, else the cluster's."""
    if nm:
        return str(Path(state.workdir) / f"conf-nm{nm['index']}")
    if state.ha and definition.daemon_kind(name) == "resourcemanager":
        return str(Path(state.workdir) / f"conf-rm{name.removeprefix('resourcemanager')}")
    if name == "zookeeper":
        return str(Path(state.workdir) / "conf-zookeeper")
    return state.conf_dir


def standin_dir(nm: dict) -> str | None:
    """The stand-in nvidia-smi's directory, for the NodeManager that discovers with it."""
    return str(Path(nm["gpu_discovery"]).parent) if nm.get("gpu_standin") else None
