"""MXNet (ps-lite): TonY's DMLC_* variables for the scheduler, servers and workers."""

from __future__ import annotations

import socket

from tony_py.frameworks.envplan import EnvPlan


def plan(spec, cluster, callbacks=None) -> EnvPlan:
    scheduler = cluster.get("scheduler", [])
    if not scheduler:
        return EnvPlan(lambda task: {})
    host, _, port = scheduler[0].rpartition(":")
    try:
        address = socket.gethostbyname(host)  # TonY resolved the scheduler's host to an IP (once per view)
    except OSError:
        address = host
    counts = {t.name: t.instances for t in spec.types}
    base = {
        "DMLC_PS_ROOT_URI": address,
        "DMLC_PS_ROOT_PORT": port,
        "DMLC_LOCAL": "0",
        "DMLC_NUM_SERVER": str(counts.get("server", 0)),
        "DMLC_NUM_WORKER": str(counts.get("worker", 0)),
    }
    return EnvPlan(lambda task: {"DMLC_ROLE": task.type, **base})
