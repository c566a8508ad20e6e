"""A training stand-in for fault tests: each task takes numbered steps, checkpoints after every
one and resumes from its checkpoint when restarted. Tasks do not talk to each other, so nothing
but TonY-py's fencing keeps a stale copy of a task from stepping on beside its replacement (a
collective training would stall instead and hide a split brain).

Every step appends one line to <dir>/steps/<task>.jsonl saying who took it: the task, the step,
the time, the container, the host, the pid, the gang attempt and the task's epoch. The checkpoint
is written (atomically) before the line, and only while the task holds its lease
(tony_py.task.holds_lease): a process frozen with its node and thawed after the lease ran out
must not write, even in the instant before its executor kills it.
"""

import argparse
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path


def main():
    import tony_py.task

    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--steps", type=int, default=100, help="the step at which each task is done")
    p.add_argument("--step-time", type=float, default=0.2)
    args = p.parse_args()
    me = f"{os.environ['JOB_NAME']}:{os.environ['TASK_INDEX']}"
    os.makedirs(f"{args.dir}/steps", exist_ok=True)
    os.makedirs(f"{args.dir}/ckpt", exist_ok=True)
    ckpt = f"{args.dir}/ckpt/{me}.json"
    who = {"task": me, "container": os.environ.get("CONTAINER_ID"), "host": os.environ.get("NM_HOST"),
           "pid": os.getpid(), "attempt": int(os.environ.get("TONY_RESTART_ATTEMPT", "0")),
           "epoch": os.environ.get("TONY_TASK_EPOCH")}
    try:
        with open(ckpt) as f:
            step = json.load(f)["step"]
        print(f"resumed from checkpoint: step {step}", flush=True)
    except FileNotFoundError:
        step = 0
    log = os.open(f"{args.dir}/steps/{me}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while step < args.steps:
        time.sleep(args.step_time)
        checked = time.time()  # what the lease guards: the check, before the writes it allows
        if not tony_py.task.holds_lease():
            print(f"lease lost before step {step + 1}: not writing", flush=True)
            time.sleep(args.step_time)
            continue
        step += 1
        with open(ckpt + f".{os.getpid()}", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ckpt + f".{os.getpid()}", ckpt)
        os.write(log, (json.dumps({**who, "step": step, "t": time.time(), "checked": checked}) + "\n").encode())
    print(f"done at step {step}", flush=True)



# ---- reading what the steps say (the fault tests and bench/faults.py) -----------------------------
@dataclass
class Writer:
    """One process that took steps of a task."""

    task: str
    container: str
    host: str
    pid: int
    attempt: int
    first: float  # time of its first step
    last: float  # time of its last step
    last_checked: float  # when it last found it held its lease (the check before its last step)
    first_step: int
    last_step: int
    steps: int


def read_steps(directory) -> list[dict]:
    out = []
    for path in sorted(Path(directory, "steps").glob("*.jsonl")):
        out += [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return out


def writers(steps: list[dict]) -> dict[str, list[Writer]]:
    """Per task, the processes that took its steps, in the order they started."""
    found: dict[tuple, Writer] = {}
    for s in sorted(steps, key=lambda s: s["t"]):
        key = (s["task"], s["container"], s["pid"])
        w = found.get(key)
        if w is None:
            found[key] = Writer(s["task"], s["container"], s["host"], s["pid"], s["attempt"], s["t"], s["t"],
                                s.get("checked", s["t"]), s["step"], s["step"], 1)
        else:
            w.last, w.last_step, w.steps = s["t"], s["step"], w.steps + 1
            w.last_checked = s.get("checked", s["t"])
    by_task: dict[str, list[Writer]] = {}
    for w in sorted(found.values(), key=lambda w: w.first):
        by_task.setdefault(w.task, []).append(w)
    return by_task


def split_brain(steps: list[dict]) -> list[str]:
    """Every pair of processes that took steps of the same task while both were live: one wrote
    after the other had started. Empty when each copy of a task stopped before the next wrote."""
    found = []
    for task, ws in writers(steps).items():
        for i, a in enumerate(ws):
            for b in ws[i + 1:]:
                if a.last > b.first:
                    found.append(f"{task}: {a.host} pid {a.pid} ({a.container}, attempt {a.attempt}) wrote step "
                                 f"{a.last_step} at {a.last:.3f}, {a.last - b.first:.2f} s after {b.host} pid {b.pid} "
                                 f"({b.container}, attempt {b.attempt}) wrote step {b.first_step}")
    return found


if __name__ == "__main__":
    main()
