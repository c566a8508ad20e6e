"""PyTorch DistributedDataParallel on gloo, on scikit-learn's bundled digits (no download), or
with --data on a Parquet copy of them (examples/digits_parquet.py puts one on HDFS), each rank
reading its own shard (tony_py.data).

torch.distributed reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, which TonY-py sets.
Rank 0 commits a checkpoint after every epoch to --checkpoint_dir, a local path or an hdfs://
URL (tony_py.checkpoint: atomic, fenced by the restart attempt); on start every rank resumes
from the latest, the one rank 0 found, so a restarted job continues where it stopped, on any
host when the checkpoints are on HDFS (TONY_RESTART_ATTEMPT says which restart this is).
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

from tony_py import checkpoint, data


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--data", help="the digits as Parquet (<data>/train, <data>/test), e.g. hdfs:///user/me/digits; "
                                   "default: scikit-learn's bundled copy")
    p.add_argument("--loader_workers", type=int, default=0, help="DataLoader worker processes reading --data")
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"),
                   help="a local directory or an hdfs:// URL")
    p.add_argument("--min_accuracy", type=float, default=0.90)
    p.add_argument("--epoch_sleep", type=float, default=0.0, help="slow training down (fault tests)")
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    attempt = os.environ.get("TONY_RESTART_ATTEMPT", "0")
    print(f"rank {rank} of {world} (restart attempt {attempt})", flush=True)

    epoch_batches, x_test, y_test = digits(args, rank, world)

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.learning_rate)
    loss_fn = nn.CrossEntropyLoss()

    start_epoch, step = 0, 0
    found = checkpoint.agree(checkpoint.latest(args.checkpoint_dir))  # rank 0's pick, on every rank
    if found:
        state, _ = checkpoint.load_torch(found)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, step = state["epoch"] + 1, state["step"]
        print(f"resumed from checkpoint: epoch {start_epoch}, step {step} ({found.url})", flush=True)

    first_step = True
    saved = None
    for epoch in range(start_epoch, args.epochs):
        ddp.train()
        for xb, yb in epoch_batches(epoch):
            optimizer.zero_grad()
            loss = loss_fn(ddp(xb), yb)
            loss.backward()
            optimizer.step()
            step += 1
            if first_step:
                print(f"first step done at {time.time():.3f}: step {step}", flush=True)
                first_step = False
        print(f"epoch {epoch} step {step} loss {loss.item():.4f}", flush=True)
        if rank == 0:
            saved = checkpoint.save_torch({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                           "epoch": epoch, "step": step}, args.checkpoint_dir, step) or saved
        dist.barrier()
        if args.epoch_sleep:
            time.sleep(args.epoch_sleep)

    model.eval()
    with torch.no_grad():
        predictions = model(torch.tensor(x_test, dtype=torch.float32)).argmax(dim=1).numpy()
    accuracy = float((predictions == y_test).mean())
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    if rank == 0:
        print(f"checkpoint written: {saved}", flush=True)
    dist.destroy_process_group()
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


def digits(args, rank, world):
    """(epoch -> this rank's (x, y) batches, x_test, y_test): from --data, this rank's shard of
    <data>/train (tony_py.data: the same number of rows on every rank) and all of <data>/test;
    else the bundled digits, split by DistributedSampler."""
    if args.data:
        part = data.shard(f"{args.data}/train")  # rank and world size from RANK and WORLD_SIZE
        print(f"rank {rank}: {part.rows} rows of {args.data}/train in {len(part.pieces)} row groups", flush=True)
        dataset = part.torch_dataset(args.batch_size, shuffle=True)
        loader = DataLoader(dataset, batch_size=None, num_workers=args.loader_workers)
        test = data.shard(f"{args.data}/test", rank=0, world_size=1).read()

        def from_parquet(epoch):
            dataset.set_epoch(epoch)
            return ((b["x"], b["y"]) for b in loader)
        return from_parquet, test["x"], test["y"]
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    train = TensorDataset(torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train))
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    def bundled(epoch):
        sampler.set_epoch(epoch)
        return loader
    return bundled, x_test, y_test


if __name__ == "__main__":
    main()
