"""The local pseudo-distributed Hadoop cluster (`tony cluster up|down|status`)."""

from tony_py.cluster.launcher import ClusterState, LocalCluster

__all__ = ["ClusterState", "LocalCluster"]
