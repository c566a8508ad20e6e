"""Horovod with gloo: TonY's contract.

A `driver` task runs Horovod's rendezvous server (tony_py/frameworks/horovod_driver.py) for the
host/slot plan of the workers and reports its port back (a callback); workers start only then,
each with the HOROVOD_* variables Horovod's gloo runner would give it. The plan follows
Horovod's own `get_host_assignments`: hosts in order, ranks host by host; a worker's local rank
is its position among the workers on its host (by task index), as in TonY.
"""

from __future__ import annotations

from tony_py.frameworks.envplan import EnvPlan, compact, ref

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


def plan(spec, cluster, callbacks=None) -> EnvPlan:
    workers = cluster.get("worker", [])
    slots = host_plan(workers)  # once per view: every worker's slot comes from it
    by_slot = {(p["hostname"], p["local_rank"]): p for p in slots}
    hosts = [a.rpartition(":")[0] for a in workers]
    same_host: dict[str, list[int]] = {}
    for i, host in enumerate(hosts):
        same_host.setdefault(host, []).append(i)
    info = (callbacks or {}).get(f"{DRIVER}:0", {})
    driver = cluster.get(DRIVER, [""])[0].rpartition(":")[0]
    rendezvous = info.get("host") or driver
    listed = worker_list(workers)

    def env(task) -> dict[str, str]:
        if task.type == DRIVER:
            out = {"CLUSTER_WORKER_LIST": listed, "CLUSTER_SPEC": listed}
            if spec.horovod_test_mode:
                out["TONY_HOROVOD_TEST_MODE"] = "fast-fail" if spec.horovod_fast_fail else "1"
            return out
        if task.type != "worker" or task.index >= len(workers):
            return {}
        me = hosts[task.index]
        local = same_host[me]
        slot = by_slot[(me, local.index(task.index))]
        return {
            "HOROVOD_CONTROLLER": "gloo",
            "HOROVOD_CPU_OPERATIONS": "gloo",
            "HOROVOD_GLOO_TIMEOUT_SECONDS": GLOO_TIMEOUT_S,
            "HOROVOD_GLOO_RENDEZVOUS_ADDR": rendezvous,
            "HOROVOD_GLOO_RENDEZVOUS_PORT": str(info.get("port", "")),
            "HOROVOD_RANK": str(slot["rank"]),
            "HOROVOD_SIZE": str(slot["size"]),
            "HOROVOD_LOCAL_RANK": str(slot["local_rank"]),
            "HOROVOD_LOCAL_SIZE": str(slot["local_size"]),
            "HOROVOD_CROSS_RANK": str(slot["cross_rank"]),
            "HOROVOD_CROSS_SIZE": str(slot["cross_size"]),
            "HOROVOD_HOSTNAME": me,
            # json.dumps({"slotInfos", "port", "amHost", "sameHostTaskIndexList"}) once expanded
            "CLUSTER_SPEC": '{"slotInfos":' + ref("slots") + ',"port":' + compact(info.get("port"))
                            + ',"amHost":' + compact(rendezvous) + ',"sameHostTaskIndexList":' + compact(local) + "}",
        }

    return EnvPlan(env, {"slots": slots})
