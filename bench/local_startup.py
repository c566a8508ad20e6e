"""Local mode startup: from `tony submit --local` starting to every user process running
(JSON on stdout), next to its floor in the same run.

The floor is the same user script started directly as N processes by a bare Python parent (an
interpreter start plus N fork/execs: what any launcher pays). TonY-py's number includes its
own interpreter start, imports, validation, staging, the AM loop, N executors (each a Python
process that registers and long-polls for its spec) and then the user processes. Runs
alternate (floor, local, floor, local, ...) so machine noise hits both alike; compare ratios.

Usage: bench/local_startup.py [--workers 4] [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TONY = [sys.executable, "-m", "tony_py.submit"]

# Each user process records when it started (before its own imports) and exits.
TASK = """import os, sys, time
started = time.time()
name = os.environ.get("JOB_NAME", "floor") + "-" + os.environ.get("TASK_INDEX", sys.argv[-1])
with open(os.path.join(sys.argv[1], name), "w") as f:
    f.write(repr(started))
"""

FLOOR = """import subprocess, sys
out, n = sys.argv[1], int(sys.argv[2])
procs = [subprocess.Popen([sys.executable, "task.py", out, str(i)]) for i in range(n)]
sys.exit(max(p.wait() for p in procs))
"""


def _starts(out: Path) -> list[float]:
    return [float(p.read_text()) for p in out.iterdir()]


def run_floor(src: Path, out: Path, workers: int) -> dict:
    t0 = time.time()
    subprocess.run([sys.executable, "floor.py", str(out), str(workers)], cwd=src, check=True)
    done = time.time()
    starts = _starts(out)
    assert len(starts) == workers, starts
    return {"all_running_s": max(starts) - t0, "exit_s": done - t0}


def run_local(src: Path, out: Path, workers: int, env: dict) -> dict:
    t0 = time.time()
    proc = subprocess.run(TONY + ["--local", "--quiet", "--src_dir", str(src), "--executes", "task.py",
                                  "--task_params", str(out), "--python_binary_path", sys.executable,
                                  "--conf", f"tony.worker.instances={workers}"],
                          cwd=ROOT, env=env, capture_output=True, text=True)
    done = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"local job failed ({proc.returncode}): {proc.stderr[-2000:]}")
    starts = _starts(out)
    assert len(starts) == workers, starts
    return {"first_running_s": min(starts) - t0, "all_running_s": max(starts) - t0, "exit_s": done - t0}


def summarize(samples: list[dict]) -> dict:
    return {key: {"median": round(statistics.median(s[key] for s in samples), 3),
                  "min": round(min(s[key] for s in samples), 3)} for key in samples[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    floor, local = [], []
    with tempfile.TemporaryDirectory(prefix="tony-bench-local-") as tmp:
        tmp = Path(tmp)
        src = tmp / "src"
        src.mkdir()
        (src / "task.py").write_text(TASK)
        (src / "floor.py").write_text(FLOOR)
        env = {**os.environ, "TONY_LOCAL_DIR": str(tmp / "jobs")}
        for i in range(args.runs):
            for kind, samples in (("floor", floor), ("local", local)):
                out = tmp / f"{kind}-{i}"
                out.mkdir()
                samples.append(run_floor(src, out, args.workers) if kind == "floor"
                               else run_local(src, out, args.workers, env))
    result = {"bench": "local_startup", "workers": args.workers, "runs": args.runs,
              "python": sys.version.split()[0], "cpus": os.cpu_count(),
              "floor": summarize(floor), "local": summarize(local),
              "overhead_s": round(statistics.median(l["all_running_s"] - f["all_running_s"]
                                                    for l, f in zip(local, floor)), 3)}
    print(json.dumps(result, indent=2))
    print(f"# {args.workers} workers: all user processes running {result['local']['all_running_s']['median']} s "
          f"after `tony submit --local` started (floor {result['floor']['all_running_s']['median']} s; "
          f"goal < 1 s)", file=sys.stderr)


if __name__ == "__main__":
    main()
