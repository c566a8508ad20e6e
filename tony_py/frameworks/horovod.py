"""Horovod with gloo: TonY's contract.

A `driver` task runs Horovod's rendezvous server (tony_py/frameworks/horovod_driver.py) for the
host/slot plan of the workers and reports its port back (a callback); workers start only then,
each with the HOROVOD_* variables Horovod's gloo runner would give it. The plan follows
Horovod's own `get_host_assignments`: hosts in order, ranks host by host; a worker's local rank
is its position among the workers on its host (by task index), as in TonY.
"""

from __future__ import annotations

import json

DRIVER = "driver"
GLOO_TIMEOUT_S = "2000"  # TonY's HOROVOD_GLOO_TIMEOUT_SECONDS
TEST_MODE_PORT = 9999  # TonY's test mode: no rendezvous server, this port


def host_plan(workers: list[str]) -> list[dict]:
    """One slot per worker address ("host:port"), in worker order: rank, local and cross ranks."""
    hosts: list[str] = []
    for address in workers:
        host = address.rpartition(":")[0]
        if host not in hosts:
            hosts.append(host)
    slots = {h: sum(1 for a in workers if a.rpartition(":")[0] == h) for h in hosts}
    plan, rank = [], 0
    for host in hosts:
        for local_rank in range(slots[host]):
            sharing = [h for h in hosts if slots[h] > local_rank]
            plan.append({"hostname": host, "rank": rank, "local_rank": local_rank, "local_size": slots[host],
                         "cross_rank": sharing.index(host), "cross_size": len(sharing), "size": len(workers)})
            rank += 1
    return plan


def worker_list(workers: list[str]) -> str:
    """TonY's CLUSTER_WORKER_LIST: host:slots,… in host order."""
    plan = host_plan(workers)
    hosts = list(dict.fromkeys(p["hostname"] for p in plan))
    return ",".join(f"{h}:{sum(1 for p in plan if p['hostname'] == h)}" for h in hosts)


def ready(spec, task, callbacks: dict) -> bool:
    """Workers wait for the driver's rendezvous port; the driver only for the gang."""
    return task.type == DRIVER or bool((callbacks or {}).get(f"{DRIVER}:0", {}).get("port"))


def task_env(spec, cluster, task, callbacks=None) -> dict[str, str]:
    workers = cluster.get("worker", [])
    if task.type == DRIVER:
        env = {"CLUSTER_WORKER_LIST": worker_list(workers), "CLUSTER_SPEC": worker_list(workers)}
        if spec.horovod_test_mode:
            env["TONY_HOROVOD_TEST_MODE"] = "fast-fail" if spec.horovod_fast_fail else "1"
        return env
    if task.type != "worker" or task.index >= len(workers):
        return {}
    info = (callbacks or {}).get(f"{DRIVER}:0", {})
    me = workers[task.index].rpartition(":")[0]
    same_host = [i for i, a in enumerate(workers) if a.rpartition(":")[0] == me]
    local_rank = same_host.index(task.index)
    slot = next(p for p in host_plan(workers) if p["hostname"] == me and p["local_rank"] == local_rank)
    driver = cluster.get(DRIVER, [""])[0].rpartition(":")[0]
    return {
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
        "HOROVOD_GLOO_TIMEOUT_SECONDS": GLOO_TIMEOUT_S,
        "HOROVOD_GLOO_RENDEZVOUS_ADDR": info.get("host") or driver,
        "HOROVOD_GLOO_RENDEZVOUS_PORT": str(info.get("port", "")),
        "HOROVOD_RANK": str(slot["rank"]),
        "HOROVOD_SIZE": str(slot["size"]),
        "HOROVOD_LOCAL_RANK": str(slot["local_rank"]),
        "HOROVOD_LOCAL_SIZE": str(slot["local_size"]),
        "HOROVOD_CROSS_RANK": str(slot["cross_rank"]),
        "HOROVOD_CROSS_SIZE": str(slot["cross_size"]),
        "HOROVOD_HOSTNAME": me,
        "CLUSTER_SPEC": json.dumps({"slotInfos": host_plan(workers), "port": info.get("port"),
                                    "amHost": info.get("host") or driver, "sameHostTaskIndexList": same_host},
                                   separators=(",", ":")),
    }
