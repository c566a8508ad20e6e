"""The unit tier, again and again, with every core kept busy: does any test depend on the load?

    .venv/bin/python bench/unit_under_load.py [--runs 20] [--load N] [--workers W] [--keep-going]
                                              [--out bench/results/unit_under_load-2core.json]

Starts N busy-loop processes (default: one per core, like `stress --cpu N`), runs
`pytest -m unit` (with W xdist workers, as scripts/test does) up to --runs times in a row, and
prints JSON: each run's exit code, wall time and failed tests, and how many passed in a row. The
baseline is the same tier on the idle machine, timed first in the same run (one pass), so the
slowdown the load caused is a ratio of two numbers from this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BUSY = "while True: pass"


def run_tier(workers: int) -> dict:
    started = time.monotonic()
    cmd = [sys.executable, "-m", "pytest", "-m", "unit", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
           "--strict-markers", "-rfE"]
    if workers:
        cmd += ["-n", str(workers), "--dist", "loadscope"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    summary = next((line for line in reversed(proc.stdout.splitlines())
                    if re.search(r"\b(passed|failed|error)\b.* in [\d.]+s", line)), "")
    out = {"rc": proc.returncode, "wall_s": round(time.monotonic() - started, 1), "summary": summary.strip("= "),
           "failed": re.findall(r"^(?:FAILED|ERROR) (\S+)", proc.stdout, re.M)}
    if proc.returncode:
        out["output_tail"] = proc.stdout[-6000:]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--load", type=int, default=os.cpu_count() or 2, help="busy-loop processes (default: cores)")
    p.add_argument("--workers", type=int, default=int(os.environ.get("TONY_TEST_WORKERS", "4")),
                   help="xdist workers (0: serial)")
    p.add_argument("--keep-going", action="store_true", help="run all --runs even after a failure")
    p.add_argument("--out", help="also write the JSON here")
    args = p.parse_args()

    idle = run_tier(args.workers)
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.load)]
    runs = []
    try:
        for n in range(args.runs):
            runs.append(run_tier(args.workers))
            print(f"[unit_under_load] run {n + 1}/{args.runs}: rc {runs[-1]['rc']}, {runs[-1]['wall_s']} s, "
                  f"{runs[-1]['summary']}", file=sys.stderr, flush=True)
            if runs[-1]["rc"] != 0 and not args.keep_going:
                break
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    in_a_row = next((i for i, r in enumerate(runs) if r["rc"] != 0), len(runs))
    walls = sorted(r["wall_s"] for r in runs)
    result = {
        "cpu_count": os.cpu_count(), "busy_loops": args.load, "xdist_workers": args.workers,
        "idle_baseline": idle, "runs": runs, "passed_in_a_row": in_a_row, "all_passed": in_a_row == args.runs,
        "median_wall_s_under_load": walls[len(walls) // 2] if walls else None,
        "slowdown_vs_idle": round(walls[len(walls) // 2] / idle["wall_s"], 2) if walls and idle["wall_s"] else None,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0 if result["all_passed"] and idle["rc"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
