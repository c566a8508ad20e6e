"""A training stand-in for fault tests: each task takes numbered steps, checkpoints after every
one (or every --ckpt-every steps) and resumes from its checkpoint when restarted. Tasks do not
talk to each other, so nothing but TonY-py's fencing keeps a stale copy of a task from stepping
on beside its replacement (a collective training would stall instead and hide a split brain).

Every step appends one line to <dir>/steps/<task>.jsonl saying who took it: the task, the step,
the time it was written and the time its lease was checked, the container, the host, the pid and
the gang attempt. A checkpoint is written (atomically) before its step's line, and only while the
task holds its lease (tony_py.task.holds_lease): a process frozen with its node and thawed after
the lease ran out must not decide to write, even in the instant before its executor kills it.
A process frozen between that check and its write still lands the write after the thaw (no
lease can stop what is past its check): so the checkpoint is fenced by the gang attempt, which
grows with every copy of the task (TONY_RESTART_ATTEMPT) — each attempt writes a file of its
own and a copy resumes from the highest — and a late write cannot overwrite a newer copy's.

The checkpoints go to --ckpt-dir: a local directory (default <dir>/ckpt) or an hdfs:// or
viewfs:// URL, written through tony_py.hdfs (hdfs-native, as the job's user), so a copy started
on another host with no directory shared with the first finds them. A checkpoint that cannot be
written (HDFS unreachable) is tried again, and its step is not taken until it is.
With --until-file, a task that took its last step exits only once that file exists (a test
that must see something happen while the job runs creates it after).
"""

import argparse
import contextlib
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path


def main():
    import tony_py.task

    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True, help="where the step log goes (<dir>/steps)")
    p.add_argument("--ckpt-dir", help="where the checkpoints go: a directory or an hdfs:// (viewfs://) URL "
                                      "(default: <dir>/ckpt)")
    p.add_argument("--ckpt-every", type=int, default=1, help="a checkpoint every this many steps (a restarted copy "
                                                              "redoes fewer)")
    p.add_argument("--steps", type=int, default=100, help="the step at which each task is done")
    p.add_argument("--step-time", type=float, default=0.2)
    p.add_argument("--until-file", help="once done, exit only when this file exists: the job outlives what a test "
                                        "waits for, however fast the machine steps")
    args = p.parse_args()
    me = f"{os.environ['JOB_NAME']}:{os.environ['TASK_INDEX']}"
    attempt = int(os.environ.get("TONY_RESTART_ATTEMPT", "0"))
    os.makedirs(f"{args.dir}/steps", exist_ok=True)
    ckpt = Checkpoint(args.ckpt_dir or f"{args.dir}/ckpt", checkpoint_name(me), attempt)
    who = {"task": me, "container": os.environ.get("CONTAINER_ID"), "host": os.environ.get("NM_HOST"),
           "pid": os.getpid(), "attempt": attempt}
    step = resume(ckpt.url, ckpt.name)
    if step:
        print(f"resumed from checkpoint: step {step}", flush=True)
    log = os.open(f"{args.dir}/steps/{me}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while step < args.steps:
        time.sleep(args.step_time)
        checked = time.time()  # what the lease guards: the check, before the writes it allows
        if not tony_py.task.holds_lease():
            print(f"lease lost before step {step + 1}: not writing", flush=True)
            time.sleep(args.step_time)
            continue
        try:
            if (step + 1) % args.ckpt_every == 0 or step + 1 == args.steps:
                ckpt.save(step + 1)
        except Exception as exc:  # noqa: BLE001 - storage away (a DataNode cut off): the step waits for it
            print(f"checkpoint of step {step + 1} not written, trying again: {exc}", flush=True)
            continue
        step += 1
        os.write(log, (json.dumps({**who, "step": step, "t": time.time(), "checked": checked}) + "\n").encode())
    print(f"done at step {step}", flush=True)
    while args.until_file and not os.path.exists(args.until_file):
        time.sleep(args.step_time)


def checkpoint_name(task: str) -> str:
    """A task's checkpoint file stem: HDFS refuses ':' in a path's names."""
    return task.replace(":", "-")


def storage(url: str):
    """(the fsspec file system, the path in it) of a local directory or an hdfs:// / viewfs:// URL."""
    import fsspec

    if "://" in url:
        import tony_py.hdfs  # noqa: F401 - hdfs:// and viewfs:// through hdfs-native, as the job's user
    return fsspec.core.url_to_fs(url)


class Checkpoint:
    """A task's checkpoint, fenced by its attempt: <url>/<name>.<attempt>.json, one file per
    attempt, each save all or nothing (a temporary file of its own, renamed over the last)."""

    def __init__(self, url: str, name: str, attempt: int):
        self.url, self.name, self.attempt = url.rstrip("/"), name, attempt
        self.fs, self.dir = storage(self.url)
        self.fs.makedirs(self.dir, exist_ok=True)
        self.path = f"{self.dir}/{name}.{attempt}.json"

    def save(self, step: int) -> None:
        # a name per try: a write cut off mid-way leaves its file open under this process's
        # HDFS lease, and HDFS refuses to create that name again while it is (a failed save of a
        # step is tried again under a new name)
        tmp = f"{self.dir}/.{self.name}.{self.attempt}.{os.getpid()}.{step}.{time.monotonic_ns()}.tmp"
        try:
            with self.fs.open(tmp, "wb") as f:
                f.write(json.dumps({"step": step}).encode())
            self.fs.mv(tmp, self.path, overwrite=True)
        except BaseException:
            with contextlib.suppress(Exception):
                self.fs.rm(tmp)
            raise


def resume(url: str, name: str) -> int:
    """The step in the checkpoint of the highest attempt of <url>/<name>.<attempt>.json (0: none yet)."""
    fs, directory = storage(url)
    try:
        found = [entry.rstrip("/").rsplit("/", 1)[-1] for entry in fs.ls(directory, detail=False)]
    except FileNotFoundError:
        return 0
    best = None
    for file in found:
        if not (file.startswith(f"{name}.") and file.endswith(".json")):
            continue
        try:
            attempt = int(file[len(name) + 1:-len(".json")])
        except ValueError:
            continue
        if best is None or attempt > best[0]:
            best = (attempt, file)
    if best is None:
        return 0
    with fs.open(f"{directory}/{best[1]}", "rb") as f:
        return json.loads(f.read())["step"]


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
    """Every pair of processes that took steps of the same task while both were live: one decided
    to write (its lease check) after the other had started writing. Empty when each copy of a
    task stopped deciding before the next wrote."""
    last: dict[tuple, tuple] = {}  # one line per pair of copies: the older one's last such step
    for task, a, b, s in _after_successor(steps):
        if _checked(s) > b.first:
            last[(task, a.container, a.pid, b.container, b.pid)] = (task, a, b, s)
    return [f"{task}: {a.host} pid {a.pid} ({a.container}, attempt {a.attempt}) checked its lease for step {s['step']} "
            f"{_checked(s) - b.first:.2f} s after {b.host} pid {b.pid} ({b.container}, attempt {b.attempt}) wrote "
            f"step {b.first_step}" for task, a, b, s in last.values()]


def late_landings(steps: list[dict]) -> list[str]:
    """Steps a copy decided before its successor started (its lease held) but that landed after:
    a write in flight when its node froze, landing at the thaw. Lease fencing cannot stop those;
    a fenced storage (the checkpoint per attempt here) makes them harmless."""
    return [f"{task}: {a.host} pid {a.pid} ({a.container}, attempt {a.attempt}) step {s['step']} landed "
            f"{s['t'] - b.first:.2f} s after {b.host} pid {b.pid} started, decided {b.first - _checked(s):.2f} s before"
            for task, a, b, s in _after_successor(steps) if _checked(s) <= b.first]


def _checked(step: dict) -> float:
    return step.get("checked", step["t"])


def _after_successor(steps: list[dict]):
    """(task, older copy, newer copy, a step of the older one written after the newer one's first)."""
    by_writer: dict[tuple, list[dict]] = {}
    for s in steps:
        by_writer.setdefault((s["task"], s["container"], s["pid"]), []).append(s)
    for task, ws in writers(steps).items():
        for i, a in enumerate(ws):
            for b in ws[i + 1:]:
                for s in by_writer[(task, a.container, a.pid)]:
                    if s["t"] > b.first:
                        yield task, a, b, s


if __name__ == "__main__":
    main()
