"""A PyTorch task that trains on the GPU YARN granted it: a linear model on generated data, on
`cuda`, for --seconds (long enough for the executor's GPU metrics to sample it), and records
what it saw in OUT/<task>.json.

    cuda_train.py --out OUT [--seconds S]
"""

import argparse
import json
import os
import time

import torch


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--seconds", type=float, default=8.0)
    args = p.parse_args()
    me = f"{os.environ['JOB_NAME']}:{os.environ['TASK_INDEX']}"
    record = {"CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"), "cuda_available": torch.cuda.is_available(),
              "device_count": torch.cuda.device_count()}
    device = torch.device("cuda")
    record["device_name"] = torch.cuda.get_device_name(device)
    torch.manual_seed(0)
    x = torch.randn(8192, 1024, device=device)
    y = x @ torch.randn(1024, 1, device=device) + 0.1 * torch.randn(8192, 1, device=device)
    model = torch.nn.Linear(1024, 1).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    losses, ballast = [], torch.empty(256 << 20, dtype=torch.uint8, device=device)  # 256 MB the metrics see
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        for _ in range(50):
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        torch.cuda.synchronize()
        losses.append(loss.item())
    record.update(loss_first=losses[0], loss_last=losses[-1], steps=50 * len(losses), ballast_bytes=ballast.numel(),
                  memory_allocated=torch.cuda.memory_allocated(device))
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, f"{me}.json"), "w") as f:
        json.dump(record, f)
    print(f"{me} trained on {record['device_name']}: loss {losses[0]:.4f} -> {losses[-1]:.4f}", flush=True)


if __name__ == "__main__":
    main()
