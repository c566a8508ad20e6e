"""The local Hadoop clusters (`tony cluster up|down|status`): every daemon a process on this
machine (processes.py), or every daemon a container with its own host name and address
(docker.py); one definition of both (definition.py)."""

from tony_py.cluster.daemons import ClusterState
from tony_py.cluster.processes import LocalCluster

__all__ = ["ClusterState", "LocalCluster"]
