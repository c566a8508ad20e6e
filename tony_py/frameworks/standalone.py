"""standalone: a single task that needs no cluster spec."""

from __future__ import annotations

from tony_py.frameworks.envplan import EnvPlan


def plan(spec, cluster, callbacks=None) -> EnvPlan:
    return EnvPlan(lambda task: {})
