"""What the Docker cluster is, apart from starting it (docker.py): its daemons' host names, fixed
addresses and ports, YARN's timers there, and the state `up` keeps in cluster.json."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from tony_py.cluster import definition
from tony_py.errors import SetupError

KIND = "docker"
TEST_RANGE = ipaddress.ip_network("198.18.0.0/15")
DOMAIN = "tony.test"  # RFC 6761: .test is never delegated
PORTS = {"nn_rpc_port": 8020, "nn_http_port": 9870, "dn_data_port": 9866, "dn_http_port": 9864,
         "dn_ipc_port": 9867, "rm_port": 8032, "rm_scheduler_port": 8030, "rm_tracker_port": 8031,
         "rm_admin_port": 8033, "rm_web_port": 8088}
NM_PORTS = {"nm_port": 8041, "nm_localizer_port": 8040, "nm_web_port": 8042, "nm_collector_port": 8048}
# A node is lost after 30 s and an AM attempt after 15 s (YARN: 10 min each); clients and AMs retry
# an unreachable RM for 2 min, NodeManagers 15 min (YARN's), so a healed node rejoins.
TIMERS = definition.Timers(nm_expiry_ms=30_000, am_expiry_ms=15_000, rm_connect_max_wait_ms=120_000)
# With --ha: an AM stops serving its tasks once the RM has been silent for half its expiry (it may
# have been replaced), so the expiry must be more than twice a fail-over (about 10 s here).
HA_TIMERS = definition.Timers(nm_expiry_ms=30_000, am_expiry_ms=60_000, rm_connect_max_wait_ms=120_000)
ZK_PORT = 2181
_SHORT = {"namenode": "nn", "datanode": "dn", "resourcemanager": "rm", "zookeeper": "zk",
          "resourcemanager1": "rm1", "resourcemanager2": "rm2", "kdc": "kdc"}
# NodeManager i: 20 + i; an HA pair's rm1 has the lone RM's address
_ADDRESS = {"namenode": 10, "datanode": 11, "resourcemanager": 12, "resourcemanager1": 12, "zookeeper": 13,
            "resourcemanager2": 14, "kdc": 9}


@dataclass
class Node:
    name: str  # the daemon: namenode, datanode, resourcemanager, nodemanager1, ...
    container: str
    hostname: str
    address: str
    log: str


@dataclass
class DockerClusterState:
    workdir: str
    cluster_id: str
    hadoop_version: str
    conf_dir: str
    lib_dir: str
    image: str
    network: str
    subnet: str
    nodes: list[Node]
    nodemanagers: list[dict]
    python_mounts: list[str]
    shared_dir: str
    hosts_note: str | None = None
    up_seconds: float | None = None
    kind: str = KIND
    # An HA pair (up --ha): {"zookeeper": "host:port", "rms": [{"id", "host", <port names>}]}
    ha: dict | None = None
    kerberos: dict | None = None  # up --secure: the realm (secure.hosts_plan), its KDC a container of its own

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise SetupError(f"no daemon {name!r} in this cluster ({', '.join(n.name for n in self.nodes)})")

    def web(self, name: str, port: str) -> str:
        return f"http://{self.node(name).hostname}:{PORTS[port]}"

    @property
    def rm_webs(self) -> dict[str, str]:
        """{rm id: web address}: both of an HA pair, else the lone RM's (id "rm")."""
        if self.ha:
            return {rm["id"]: f"http://{rm['host']}:{PORTS['rm_web_port']}" for rm in self.ha["rms"]}
        return {"rm": self.web("resourcemanager", "rm_web_port")}

    @property
    def rm_web(self) -> str:
        return next(iter(self.rm_webs.values()))

    @property
    def nn_web(self) -> str:
        return self.web("namenode", "nn_http_port")

    @property
    def default_fs(self) -> str:
        return f"hdfs://{self.node('namenode').hostname}:{PORTS['nn_rpc_port']}"

    def to_json(self) -> dict:
        data = dict(self.__dict__)
        data["nodes"] = [n.__dict__ for n in self.nodes]
        return data

    @classmethod
    def from_json(cls, data: dict) -> "DockerClusterState":
        data = dict(data)
        data["nodes"] = [Node(**n) for n in data.get("nodes", [])]
        return cls(**data)


def node_addresses(subnet: ipaddress.IPv4Network, names: list[str]) -> list[str]:
    """Each daemon's fixed address in the cluster's /24: masters at .10-.12, NodeManager i at .20+i."""
    out = []
    for name in names:
        offset = _ADDRESS.get(name) or 20 + int(name.removeprefix("nodemanager"))
        out.append(str(subnet.network_address + offset))
    return out
