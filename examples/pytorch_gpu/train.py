"""PyTorch on GPUs under TonY-py: one worker or DistributedDataParallel across several.

Each task uses the GPU(s) TonY-py named in CUDA_VISIBLE_DEVICES, so `cuda:0` is its own device
(with tony.worker.gpus=1). Where several tasks share one GPU on purpose
(tony.gpu.assignment=none, e.g. DDP on a one-GPU workstation), rank r picks device
r % device_count. The data is synthetic (a seeded linear problem), so nothing is downloaded.

  --backend nccl|gloo   the process group's backend (NCCL refuses two ranks on one device;
                        gloo then reduces the CUDA gradients through host memory)
  --require_cuda        fail (exit 3) unless CUDA is available
  --require_assigned    fail (exit 3) unless CUDA_VISIBLE_DEVICES names this task's device(s)
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch_size", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    p.add_argument("--require_cuda", action="store_true")
    p.add_argument("--require_assigned", action="store_true")
    p.add_argument("--min_accuracy", type=float, default=0.9)
    return p.parse_args()


def main():
    args = parse_args()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not torch.cuda.is_available():
        print(f"CUDA is not available (CUDA_VISIBLE_DEVICES={visible!r})", file=sys.stderr)
        sys.exit(3 if args.require_cuda else 0)
    if args.require_assigned and not visible:
        print("CUDA_VISIBLE_DEVICES is not set: TonY-py did not name this task's GPU", file=sys.stderr)
        sys.exit(3)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(device)
    if world > 1:
        dist.init_process_group(args.backend)
    print(f"rank {rank} of {world} on {device} ({torch.cuda.get_device_name(device)}), "
          f"CUDA_VISIBLE_DEVICES={visible} LOCAL_RANK={os.environ.get('LOCAL_RANK')}", flush=True)

    gen = torch.Generator(device=device).manual_seed(0)
    truth = torch.randn(256, 10, device=device, generator=gen)
    model = nn.Sequential(nn.Linear(256, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden), nn.ReLU(),
                          nn.Linear(args.hidden, 10)).to(device)
    net = DistributedDataParallel(model, device_ids=[device.index]) if world > 1 else model
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    loss_fn = nn.CrossEntropyLoss()
    data_gen = torch.Generator(device=device).manual_seed(1 + rank)
    started = time.time()
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 256, device=device, generator=data_gen)
        y = (x @ truth).argmax(dim=1)
        optimizer.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        optimizer.step()
        if step % 100 == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    torch.cuda.synchronize()
    elapsed = time.time() - started
    with torch.no_grad():
        x = torch.randn(8192, 256, device=device, generator=data_gen)
        accuracy = (model(x).argmax(dim=1) == (x @ truth).argmax(dim=1)).float().mean().item()
    print(f"rank {rank}: {args.steps} steps in {elapsed:.2f} s, accuracy {accuracy:.4f}, "
          f"max memory {torch.cuda.max_memory_allocated(device) / 2**20:.0f} MiB", flush=True)
    if world > 1:
        dist.destroy_process_group()
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


if __name__ == "__main__":
    main()
