"""A Ray node's limits, checked at submit (config/build.py) and used in the task (frameworks/ray.py,
ray_node.py). Standard library only: the node runner imports it inside the user's environment,
where TonY-py's own third-party packages are not on the path."""

from __future__ import annotations

from tony_py.config.spec import RAY_HEAD_TYPE

RAY_WORKER_TYPE = "worker"
# What Ray's own processes take besides its tasks, as YARN's memory check counts them (the sum of
# their RSS, measured on Ray 2.60: a head's GCS, raylet, agents and dashboard, whose ten module
# processes hold ~110 MB each, ~2 GB; a worker node's raylet and agents ~450 MB).
RAY_DAEMONS_MB = {RAY_HEAD_TYPE: 2048, RAY_WORKER_TYPE: 512}
# tony.head.memory when the job does not set it: the daemons, a 30 % object store and the driver
# (TonY's 2g default for a type is less than the head's daemons alone).
RAY_HEAD_DEFAULT_MEMORY = "3g"
RAY_MIN_OBJECT_STORE_MB = 80  # Ray refuses less than 75 MiB
RAY_MIN_TASK_MEMORY_MB = 64


def ray_min_memory_mb(role: str) -> int:
    """The smallest container a Ray node of this role fits in: its daemons, the smallest object
    store Ray accepts, and room for one task."""
    return RAY_DAEMONS_MB[role] + RAY_MIN_OBJECT_STORE_MB + RAY_MIN_TASK_MEMORY_MB


def ray_join_timeout(value: str | None) -> float | None:
    """TONY_RAY_JOIN_TIMEOUT_S (--shell_env): seconds the head waits for every worker node; None
    when not given. ValueError names what is allowed."""
    if value is None or value == "":
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"TONY_RAY_JOIN_TIMEOUT_S={value!r}: expected a number of seconds greater than 0")
    return seconds
