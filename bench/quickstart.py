"""A new user's first job, timed (JSON on stdout): `scripts/quickstart` in a fresh clone with empty
package caches (uv's, Maven's local repository, tony-py's Hadoop jars) and no local cluster
state (XDG_STATE_HOME), at this checkout's HEAD
and at a baseline revision, one after the other. What is left warm is what a fresh machine of
this kind has too: the Debian packages (JDK, Maven) and the network's own caches.

Each run ends with `tony cluster down`, so the next starts its own cluster.
Runs alternate (baseline, head, baseline, head, …) so the network's moods hit both; `wall_s` is
each side's best run, `median_s` its median.
Usage: bench/quickstart.py [--baseline REV] [--runs N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_once(rev: str, scratch: Path) -> dict:
    checkout, caches = scratch / "checkout", scratch / "caches"
    shutil.rmtree(scratch, ignore_errors=True)
    caches.mkdir(parents=True)
    subprocess.run(["git", "clone", "-q", str(ROOT), str(checkout)], check=True)
    subprocess.run(["git", "checkout", "-q", rev], cwd=checkout, check=True)
    # a fresh machine's state too: no cluster record of an earlier run (or of another version)
    env = dict(os.environ, UV_CACHE_DIR=str(caches / "uv"), TONY_PY_CACHE=str(caches / "tony-py"),
               XDG_STATE_HOME=str(caches / "state"),
               MAVEN_OPTS=f"-Dmaven.repo.local={caches / 'm2'}", PIP_NO_CACHE_DIR="1")
    started = time.monotonic()
    proc = subprocess.run(["./scripts/quickstart"], cwd=checkout, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    subprocess.run([str(checkout / ".venv/bin/tony"), "cluster", "down"], env=env, capture_output=True)
    trained = "test accuracy" in proc.stdout
    if proc.returncode != 0:
        print(proc.stdout[-2000:], proc.stderr[-2000:], file=sys.stderr)
    shutil.rmtree(scratch, ignore_errors=True)
    return {"rev": rev, "rc": proc.returncode, "trained": trained, "wall_s": round(wall, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", default="HEAD~1", help="the revision to compare with")
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    base = subprocess.run(["git", "rev-parse", "--short", args.baseline], cwd=ROOT, capture_output=True,
                          text=True).stdout.strip()
    scratch = Path(tempfile.mkdtemp(prefix="tony-quickstart-bench-"))
    runs = {"baseline": [], "head": []}
    for _ in range(args.runs):
        runs["baseline"].append(run_once(base, scratch / "baseline"))
        runs["head"].append(run_once(head, scratch / "head"))
    shutil.rmtree(scratch, ignore_errors=True)
    best = {k: min(r["wall_s"] for r in v) for k, v in runs.items()}
    median = {k: round(statistics.median(r["wall_s"] for r in v), 1) for k, v in runs.items()}
    print(json.dumps({"benchmark": "quickstart", "cpu_count": os.cpu_count(), "baseline_rev": base, "head_rev": head,
                      "runs": runs, "wall_s": best, "median_s": median, "ratio": round(best["head"] / best["baseline"], 3),
                      "ratio_of_medians": round(median["head"] / median["baseline"], 3)}, indent=2))


if __name__ == "__main__":
    main()
