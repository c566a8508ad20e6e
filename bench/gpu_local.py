"""Real-GPU check in local mode (JSON on stdout): run on a machine with an NVIDIA GPU.

PyTorch (examples/pytorch_gpu):

1. one worker with tony.worker.gpus=1 running examples/pytorch_gpu/train.py --require_cuda:
   it must run on CUDA with CUDA_VISIBLE_DEVICES naming its device;
2. two workers training with DistributedDataParallel on that machine's GPU(s): each on its own
   device when there are two or more, else both on the one device (tony.gpu.assignment=none)
   with NCCL, and with gloo if NCCL refuses two ranks on one device.
JAX (examples/jax_dp, tony.application.framework=jax):
3. one worker with tony.worker.gpus=1 running the data-parallel example with --require_gpu: JAX's
   backend must be the GPU, with CUDA_VISIBLE_DEVICES naming the task's device;
4. the same example's two processes: on a GPU each when there are two or more, else both on the
   one device (tony.gpu.assignment=none, JAX not preallocating it).
For each job: its exit, the devices each task was given, its GPU metrics (TonY's names, from
nvidia-smi through the executor) and its wall time.

Usage: bench/gpu_local.py [--steps 400] [--python PYTHON] [--only pytorch|jax]
(PYTHON: the interpreter with torch and jax)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py import api  # noqa: E402
from tony_py.am.core.gpus import local_devices  # noqa: E402

EXAMPLE = ROOT / "examples" / "pytorch_gpu"
METRICS = ("MAX_GPU_UTILIZATION", "AVG_GPU_UTILIZATION", "MAX_GPU_FB_MEMORY_USAGE", "gpu_memory_total_bytes")


def run_job(python: str, params: str, conf: dict[str, str], example: Path = EXAMPLE, framework: str = "pytorch",
            prefix: str = "rank ") -> dict:
    started = time.time()
    job = api.submit("train.py", src_dir=str(example), task_params=params, python_binary_path=python,
                     conf={"tony.application.framework": framework, "tony.task.metrics-interval-ms": "500", **conf},
                     local=True)
    with job:
        state = job.wait(timeout=600)
        status = job.status()
    tasks = {}
    for t in status.tasks:
        tasks[t.name] = {"state": t.state, "exit_code": t.exit_code, "gpus": list(t.gpus),
                         "metrics": {k: t.metrics[k] for k in METRICS if k in t.metrics}}
    lines = []
    for out in sorted(job.logs.glob("*/attempt-0.stdout")):
        lines += [l for l in out.read_text().splitlines() if l.startswith(prefix)]
    errors = [p.read_text()[-1500:] for p in sorted(job.logs.glob("*/attempt-0.stderr")) if p.read_text().strip()]
    return {"state": state, "final_status": status.final_status, "wall_s": round(time.time() - started, 2),
            "tasks": tasks, "output": lines, "diagnostics": status.diagnostics[-1500:] if state != "SUCCEEDED" else "",
            "stderr_tails": errors if state != "SUCCEEDED" else []}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--only", choices=("pytorch", "jax"))
    args = ap.parse_args()
    devices = local_devices(dict(os.environ))
    smi = subprocess.run(["nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader"],
                         capture_output=True, text=True)
    result = {"bench": "gpu_local", "devices": devices, "nvidia_smi": smi.stdout.strip().splitlines()}
    if args.only != "pytorch":
        result["jax_one_worker"] = run_job(args.python, "--epochs 10 --require_gpu",
                                           {"tony.worker.instances": "1", "tony.worker.gpus": "1"},
                                           example=ROOT / "examples" / "jax_dp", framework="jax", prefix="process ")
        # the same example's 2 processes: on a GPU each, or both on the one there is (not preallocating)
        two = ({"tony.worker.instances": "2", "tony.worker.gpus": "1"} if len(devices) >= 2 else
               {"tony.worker.instances": "2", "tony.gpu.assignment": "none",
                "tony.execution.envs": "XLA_PYTHON_CLIENT_PREALLOCATE=false"})
        result["jax_two_processes"] = run_job(args.python, "--epochs 10 --require_gpu", two,
                                              example=ROOT / "examples" / "jax_dp", framework="jax", prefix="process ")
    if args.only == "jax":
        print(json.dumps(result, indent=2))
        return
    steps = f"--steps {args.steps}"
    result["one_worker"] = run_job(args.python, f"{steps} --require_cuda --require_assigned",
                                   {"tony.worker.instances": "1", "tony.worker.gpus": "1"})
    if len(devices) >= 2:
        ddp_conf, checks = {"tony.worker.instances": "2", "tony.worker.gpus": "1"}, "--require_cuda --require_assigned"
    else:  # two ranks on one device: nothing to assign, both see it
        ddp_conf, checks = {"tony.worker.instances": "2", "tony.gpu.assignment": "none"}, "--require_cuda"
    result["ddp_nccl"] = run_job(args.python, f"{steps} --backend nccl {checks}", ddp_conf)
    if result["ddp_nccl"]["state"] != "SUCCEEDED":
        result["ddp_gloo"] = run_job(args.python, f"{steps} --backend gloo {checks}", ddp_conf)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
