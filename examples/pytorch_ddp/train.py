"""PyTorch DistributedDataParallel on gloo, on scikit-learn's bundled digits (no download).

torch.distributed reads MASTER_ADDR, MASTER_PORT, RANK and WORLD_SIZE, which TonY-py sets.
Rank 0 writes a checkpoint after every epoch; on start every rank resumes from it if it
exists, so a restarted job continues where it stopped (TONY_RESTART_ATTEMPT says which
restart this is).
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


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=15)
    p.add_argument("--batch_size", type=int, default=32)
    p.add_argument("--learning_rate", type=float, default=1e-3)
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"))
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

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    train = TensorDataset(torch.tensor(x_train, dtype=torch.float32), torch.tensor(y_train))
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)

    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=args.learning_rate)
    loss_fn = nn.CrossEntropyLoss()

    ckpt_path = os.path.join(args.checkpoint_dir, "digits.pt")
    start_epoch, step = 0, 0
    if os.path.exists(ckpt_path):
        state = torch.load(ckpt_path, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start_epoch, step = state["epoch"] + 1, state["step"]
        print(f"resumed from checkpoint: epoch {start_epoch}, step {step}", flush=True)

    first_step = True
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)
        ddp.train()
        for xb, yb in loader:
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
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            tmp = ckpt_path + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                        "epoch": epoch, "step": step}, tmp)
            os.replace(tmp, ckpt_path)
        dist.barrier()
        if args.epoch_sleep:
            time.sleep(args.epoch_sleep)

    model.eval()
    with torch.no_grad():
        predictions = model(torch.tensor(x_test, dtype=torch.float32)).argmax(dim=1).numpy()
    accuracy = float((predictions == y_test).mean())
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    if rank == 0:
        print(f"checkpoint written: {ckpt_path}", flush=True)
    dist.destroy_process_group()
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


if __name__ == "__main__":
    main()
