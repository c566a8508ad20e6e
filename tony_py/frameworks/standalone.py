"""standalone: a single task that needs no cluster spec."""

from __future__ import annotations


def task_env(spec, cluster, task, callbacks=None) -> dict[str, str]:
    return {}
