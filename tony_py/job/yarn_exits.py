"""YARN's ContainerExitStatus values that decide how a container's end is read: by the AM's
restart policy (am/core/policy.py), the Airflow operator's retry rules and the advice (a task YARN
killed for memory)."""

# The others (e.g. -105, killed by the AM) are read from their context.
EXIT_ABORTED = -100
EXIT_DISKS_FAILED = -101
EXIT_PREEMPTED = -102
EXIT_KILLED_EXCEEDED_VMEM = -103
EXIT_KILLED_EXCEEDED_PMEM = -104
EXIT_KILLED_BY_RESOURCEMANAGER = -106
EXIT_KILLED_BY_CONTAINER_SCHEDULER = -108

INFRASTRUCTURE_EXITS = {
    EXIT_ABORTED: "the container was aborted (released, or its node was lost)",
    EXIT_DISKS_FAILED: "the node's disks failed",
    EXIT_PREEMPTED: "the container was preempted by the scheduler",
    EXIT_KILLED_BY_RESOURCEMANAGER: "the ResourceManager killed the container",
    EXIT_KILLED_BY_CONTAINER_SCHEDULER: "the NodeManager's container scheduler killed the container",
}
# Taken back for another queue or a guaranteed container: warned (PreemptionMessage) or not.
PREEMPTED_EXITS = frozenset({EXIT_PREEMPTED, EXIT_KILLED_BY_CONTAINER_SCHEDULER})
MEMORY_EXITS = {
    EXIT_KILLED_EXCEEDED_VMEM: "the container exceeded its virtual memory limit",
    EXIT_KILLED_EXCEEDED_PMEM: "the container exceeded its physical memory limit",
}
