"""PyTorch: the standard torch.distributed env (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
LOCAL_RANK) plus TonY's INIT_METHOD / RANK / WORLD, so both `init_process_group("gloo")` with
env:// and TonY-era scripts work.

Ranks are global across the trainer types, chief first, then master, then worker, so a job
with a chief does not get two rank-0 processes (TonY's per-type RANK collided there).
"""

from __future__ import annotations

from tony_py.frameworks.envplan import EnvPlan

TRAINER_TYPES = ("chief", "master", "worker")


def trainers(cluster) -> list[tuple[str, int, str]]:
    out = []
    for name in TRAINER_TYPES:
        for index, addr in enumerate(cluster.get(name, [])):
            out.append((name, index, addr))
    return out


def ranks(ranked) -> dict[tuple[str, int], int]:
    """{(type, index): rank} of trainers() in its order."""
    return {(name, index): rank for rank, (name, index, _addr) in enumerate(ranked)}


def plan(spec, cluster, callbacks=None) -> EnvPlan:
    ranked = trainers(cluster)
    if not ranked:
        return EnvPlan(lambda task: {})
    master_addr, _, master_port = ranked[0][2].rpartition(":")
    world = str(len(ranked))
    base = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
        "WORLD_SIZE": world,
        "WORLD": world,
        "INIT_METHOD": f"tcp://{ranked[0][2]}",
    }
    rank_of = ranks(ranked)

    def env(task) -> dict[str, str]:
        out = dict(base)
        rank = rank_of.get((task.type, task.index))
        if rank is not None:
            # Each task is its own local group: it sees only its own GPUs (CUDA_VISIBLE_DEVICES),
            # so cuda:LOCAL_RANK is its device, as torchrun's one-process-per-node case.
            out.update(RANK=str(rank), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", GROUP_RANK=str(rank))
        return out

    return EnvPlan(env)
