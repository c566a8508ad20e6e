"""A DistributedDataParallel script written the way PyTorch's own DDP examples are, for
torchrun: it reads only what torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, …) and knows nothing
of TonY-py. Each process checks the world it joined, takes a few DDP steps on a tiny model,
checks an all_reduce, and writes what it saw to <out>/rank-<RANK>.json."""

import argparse
import json
import os
import socket

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

SEEN = ("RANK", "LOCAL_RANK", "GROUP_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_ERROR_FILE",
        "CONTAINER_ID", "JOB_ID", "JOB_NAME", "TASK_INDEX", "TONY_RESTART_ATTEMPT", "INIT_METHOD", "WORLD",
        "OMP_NUM_THREADS", "TONY_TORCHRUN_RDZV_ENDPOINT")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--local_world_size", default="2")
    p.add_argument("--world_size", default="4")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert os.environ["LOCAL_WORLD_SIZE"] == args.local_world_size, os.environ["LOCAL_WORLD_SIZE"]
    assert os.environ["WORLD_SIZE"] == args.world_size, os.environ["WORLD_SIZE"]
    assert world == int(args.world_size), world
    assert rank == int(os.environ["RANK"])

    torch.manual_seed(0)
    model = DDP(nn.Linear(8, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    torch.manual_seed(1 + rank)  # each rank its own data: DDP keeps the replicas equal anyway
    for _ in range(args.steps):
        optimizer.zero_grad()
        model(torch.randn(16, 8)).pow(2).mean().backward()
        optimizer.step()
    weight = model.module.weight.detach().clone()
    total = weight.clone()
    dist.all_reduce(total)
    assert torch.allclose(total, weight * world, atol=1e-5), "the replicas differ after DDP steps"
    ranks = torch.tensor([float(rank)])
    dist.all_reduce(ranks)
    assert ranks.item() == sum(range(world)), ranks.item()

    record = {k: os.environ.get(k) for k in SEEN}
    record.update(rank=rank, local_rank=local_rank, world=world, pid=os.getpid(), host=socket.gethostname(),
                  rank_sum=ranks.item())
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"rank-{rank}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(record, f)
    os.replace(path + ".tmp", path)
    print(f"rank {rank} (local {local_rank}) of {world}: done", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
