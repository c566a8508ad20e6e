"""Every form of tony_py.checkpoint against --dest (an hdfs:// URL), from a PyTorch job of two
ranks (gloo): torch.distributed.checkpoint with a part of its own per rank, torch.save/torch.load
from rank 0, and a local directory committed and fetched back (what TensorFlow and JAX do). Each
rank prints one line, `result {json}`, of what it wrote and what it read back, for the test to
check next to what the NameNode lists.
"""

import argparse
import json
import os
import tempfile

import torch
import torch.distributed as dist

from tony_py import checkpoint, data


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--dest", required=True)
    args = p.parse_args()
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    result = {"rank": rank}

    state = {"shared": torch.arange(6.0), f"rank{rank}": torch.full((3,), rank + 1.0)}
    result["dcp"] = checkpoint.save_dcp(state, f"{args.dest}/dcp", 10)
    back = {name: torch.zeros_like(t) for name, t in state.items()}
    result["dcp_loaded"] = checkpoint.load_dcp(back, f"{args.dest}/dcp").url
    result["dcp_equal"] = all(torch.equal(back[n], state[n]) for n in state)

    if rank == 0:
        weights = {"w": torch.randn(1 << 20), "epoch": 3}  # 4 MiB: more than one packet each way
        result["torch"] = checkpoint.save_torch(weights, f"{args.dest}/torch", 20)
        loaded, found = checkpoint.load_torch(f"{args.dest}/torch")
        result["torch_loaded"] = found.url
        result["torch_equal"] = torch.equal(loaded["w"], weights["w"]) and loaded["epoch"] == 3
        with tempfile.TemporaryDirectory() as local, tempfile.TemporaryDirectory() as restored:
            for name, text in (("model.index", "index"), ("variables/part-0", "values")):
                os.makedirs(os.path.dirname(os.path.join(local, name)), exist_ok=True)
                with open(os.path.join(local, name), "w") as f:
                    f.write(text)
            result["committed"] = checkpoint.commit(local, f"{args.dest}/tf", 30)
            fetched = checkpoint.fetch(checkpoint.latest(f"{args.dest}/tf"), restored)
            result["fetched"] = {os.path.relpath(os.path.join(d, n), fetched): open(os.path.join(d, n)).read()
                                 for d, _, names in os.walk(fetched) for n in names}
        try:
            data.shard(f"{args.dest}/no-such-data")
        except FileNotFoundError as exc:
            result["missing"] = {"filename": exc.filename, "message": str(exc)}
    print("result " + json.dumps(result), flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
