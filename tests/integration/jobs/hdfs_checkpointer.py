"""A training loop that keeps its checkpoints on HDFS only (tony_py.hdfs: hdfs-native, the
container's tokens), so a copy restarted on another host resumes from there: no shared mount.

    hdfs_checkpointer.py BASE --steps N --every K [--step-s S]

Per task (JOB_NAME-TASK_INDEX = T) and gang attempt A (TONY_RESTART_ATTEMPT):
- at its start: restores from the newest commit in BASE/ckpt/T (by attempt, then step: a later
  attempt began from the newest commit there was, so whatever an older attempt committed after
  that came from a copy that was cut off), and records where it resumed, on which host, in
  BASE/resumed/T-aA;
- each step: adds the step's number to its state, then records that it took it (an empty
  BASE/steps/T/sSTEP-aA);
- every K steps: commits its state: written to BASE/ckpt/T/.stepSTEP-aA.partial, renamed to
  BASE/ckpt/T/stepSTEP-aA. The attempt in the name fences it: a copy of an older attempt that
  was cut off but still runs can only add names of its own, never replace a newer attempt's;
  a copy killed mid-write leaves a .partial that no restore reads;
- at the end: BASE/out/T.json, its state (the sum of every step, when no step was lost or
  counted twice) and where it resumed.
"""

import argparse
import json
import os
import re
import socket
import sys
import time

import tony_py.hdfs

COMMIT = re.compile(r"step(\d+)-a(\d+)$")


def newest_commit(fs, ckpt: str):
    """(attempt, step, path) of the newest commit, or None."""
    if not fs.exists(ckpt):
        return None
    found = [(int(m.group(2)), int(m.group(1)), p) for p in fs.ls(ckpt, detail=False)
             if (m := COMMIT.search(p.rsplit("/", 1)[-1]))]
    return max(found) if found else None


def write(fs, path: str, data: bytes) -> None:
    with fs.open(path, "wb") as f:
        f.write(data)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("base")
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--every", type=int, required=True)
    p.add_argument("--step-s", type=float, default=1.0)
    args = p.parse_args()
    me = f"{os.environ['JOB_NAME']}-{os.environ['TASK_INDEX']}"
    attempt = int(os.environ.get("TONY_RESTART_ATTEMPT", "0"))
    fs = tony_py.hdfs.filesystem("hdfs://" + args.base)
    ckpt, steps = f"{args.base}/ckpt/{me}", f"{args.base}/steps/{me}"
    fs.mkdir(ckpt)
    fs.mkdir(steps)
    newest = newest_commit(fs, ckpt)
    state = {"step": -1, "sum": 0}
    if newest:
        with fs.open(newest[2], "rb") as f:
            state = json.loads(f.read())
    resumed = {"from_step": state["step"], "from_attempt": newest[0] if newest else None,
               "host": socket.getfqdn(), "attempt": attempt}
    write(fs, f"{args.base}/resumed/{me}-a{attempt}", json.dumps(resumed).encode())
    print(f"{me} attempt {attempt} on {resumed['host']}: resumed after step {state['step']}", flush=True)
    for step in range(state["step"] + 1, args.steps):
        time.sleep(args.step_s)  # the step's work
        state = {"step": step, "sum": state["sum"] + step}
        write(fs, f"{steps}/s{step}-a{attempt}", b"")
        if (step + 1) % args.every == 0:
            partial = f"{ckpt}/.step{step}-a{attempt}.partial"
            write(fs, partial, json.dumps(state).encode())
            fs.mv(partial, f"{ckpt}/step{step}-a{attempt}")
            print(f"{me}: committed step {step}", flush=True)
    write(fs, f"{args.base}/out/{me}.json", json.dumps({**state, "resumed": resumed}).encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
