"""PyTorch: the standard torch.distributed env (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
LOCAL_RANK) plus TonY's INIT_METHOD / RANK / WORLD, so both `init_process_group("gloo")` with
env:// and TonY-era scripts work.

Ranks are global across the trainer types, chief first, then master, then worker, so a job
with a chief does not get two rank-0 processes (TonY's per-type RANK collided there).
"""

from __future__ import annotations

TRAINER_TYPES = ("chief", "master", "worker")


def trainers(cluster) -> list[tuple[str, int, str]]:
    out = []
    for name in TRAINER_TYPES:
        for index, addr in enumerate(cluster.get(name, [])):
            out.append((name, index, addr))
    return out


def task_env(spec, cluster, task, callbacks=None) -> dict[str, str]:
    ranked = trainers(cluster)
    if not ranked:
        return {}
    master_addr, _, master_port = ranked[0][2].rpartition(":")
    world = str(len(ranked))
    env = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
        "WORLD_SIZE": world,
        "WORLD": world,
        "INIT_METHOD": f"tcp://{ranked[0][2]}",
    }
    for rank, (name, index, _addr) in enumerate(ranked):
        if (name, index) == (task.type, task.index):
            env.update(
                RANK=str(rank),
                LOCAL_RANK="0",
                LOCAL_WORLD_SIZE="1",
                GROUP_RANK=str(rank),
            )
    return env
