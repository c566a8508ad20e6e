"""Preemption, measured (JSON on stdout): what YARN taking a container back costs a TonY-py job,
with the warning relayed to the task (it checkpoints on SIGTERM) and without it (the same job
whose tasks ignore the warning and keep only their periodic checkpoint, every --ckpt-every steps),
side by side on the same local cluster in one run.

Each run: a 2-worker job in queue `default` fills the process cluster (11 GB workers on 12 GB
NodeManagers); once both step, a 1-worker job in `urgent` arrives; YARN's preemption monitor takes
one worker back (5 s from the warning to the kill on this cluster); the urgent job runs 3 s and
ends; the first job restarts from tony.application.max-infrastructure-restarts and resumes.

  warned_before_kill_s  how long before YARN's kill the task got SIGTERM (None: never warned)
  steps_lost            steps the preempted task took that its next run took again
  user_retries_spent    tony.am.retry-count restarts spent (must be 0)
  infra_restarts        restarts from the infrastructure's budget
  out_of_training_s     the preempted task's last step until its first after the restart (it
                        waits for the urgent job's submit-to-exit, urgent_job_s, to give the room back)

Usage: bench/preemption.py [--runs N] [--workdir DIR]   (starts its own process cluster, leaves it up)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration")]

from test_preemption import FILL_MB, steps  # noqa: E402
from tony_py.cluster import LocalCluster  # noqa: E402

JOBS = ROOT / "tests" / "integration" / "jobs"


def submit(env, *args) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tony_py.submit", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def wait(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError("timed out")


def one_run(env, tmp: Path, name: str, warned: bool, ckpt_every: int) -> dict:
    out = tmp / name
    params = f"--dir {out} --ckpt-every {ckpt_every}" + (" --checkpoint-on-sigterm" if warned else "")
    low = submit(env, "--src_dir", str(JOBS), "--executes", "preemptible.py", "--python_binary_path", sys.executable,
                 "--task_params", params, "--conf", "tony.worker.instances=2",
                 "--conf", f"tony.worker.memory={FILL_MB}m", "--conf", "tony.am.memory=512m")
    wait(lambda: all(len(steps(out, t)) > 3 * ckpt_every // 2 for t in ("worker:0", "worker:1")), 180)
    urgent_started = time.time()
    urgent = subprocess.run([sys.executable, "-m", "tony_py.submit", "--quiet", "--src_dir", str(JOBS),
                             "--executes", "probe.py", "--python_binary_path", sys.executable,
                             "--task_params", f"--out {tmp / (name + '-urgent')} --sleep *:3",
                             "--conf", "tony.worker.instances=1", "--conf", "tony.worker.memory=6g",
                             "--conf", "tony.am.memory=512m", "--conf", "tony.yarn.queue=urgent"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    urgent_done = time.time()
    if urgent.returncode != 0:
        raise RuntimeError(f"the urgent job failed: {urgent.stdout[-2000:]}{urgent.stderr[-2000:]}")
    resumed = lambda t: [r for r in steps(out, t) if r.get("attempt") == 1 and r.get("step")]  # noqa: E731
    wait(lambda: all(resumed(t) for t in ("worker:0", "worker:1")), 180)
    (out / "release").touch()
    text, _ = low.communicate(timeout=180)
    if low.returncode != 0:
        raise RuntimeError(f"the preempted job failed: {text[-3000:]}")
    app_id = re.search(r"application_\d+_\d+", text).group(0)
    shown = subprocess.run([sys.executable, "-m", "tony_py.cli", "history", "show", app_id, "--events", "--json"],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    if shown.returncode != 0:
        raise RuntimeError(f"tony history show {app_id}: {shown.stderr[-2000:]}")
    hist = json.loads(shown.stdout)
    warning = next(e for e in hist["events"] if e["kind"] == "PREEMPTION")
    victim = warning["task"]
    records = steps(out, victim)
    sigterm = next((r for r in records if "sigterm" in r and r["attempt"] == 0), None)
    last = max(r["step"] for r in records if r["attempt"] == 0 and "step" in r)
    start = next(r["resumed_from"] for r in records if r["attempt"] == 1 and "resumed_from" in r)
    return {"app_id": app_id, "victim": victim,
            "warned_before_kill_s": round(warning["deadline"] - sigterm["t"], 2) if sigterm else None,
            "steps_lost": last - start, "user_retries_spent": hist["restarts_used"],
            "infra_restarts": hist["infra_restarts_used"],
            "out_of_training_s": round(min(r["t"] for r in resumed(victim))
                                       - max(r["t"] for r in records if r["attempt"] == 0 and "step" in r), 2),
            "urgent_job_s": round(urgent_done - urgent_started, 2)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--ckpt-every", type=int, default=40, help="the periodic checkpoint, in steps of 50 ms")
    parser.add_argument("--workdir", default=str(ROOT / ".bench-cluster"))
    opts = parser.parse_args()
    state, _ = LocalCluster(Path(opts.workdir).resolve()).up()
    env = {**os.environ, "HADOOP_CONF_DIR": state.conf_dir}
    env.pop("TONY_CONF_DIR", None)
    runs = {"warned": [], "unwarned": []}
    with tempfile.TemporaryDirectory(prefix="tony-bench-preemption-") as tmp:
        for i in range(opts.runs):  # alternating: the machine's noise falls on both alike
            for kind in runs:
                runs[kind].append(one_run(env, Path(tmp), f"{kind}-{i}", kind == "warned", opts.ckpt_every))
    summary = {kind: {key: statistics.median(r[key] for r in rs) for key in
                      ("steps_lost", "user_retries_spent", "infra_restarts", "out_of_training_s", "urgent_job_s")}
               for kind, rs in runs.items()}
    summary["warned"]["warned_before_kill_s"] = statistics.median(r["warned_before_kill_s"] for r in runs["warned"])
    print(json.dumps({"benchmark": "preemption", "cpu_count": os.cpu_count(), "runs": opts.runs,
                      "ckpt_every_steps": opts.ckpt_every, "step_s": 0.05, "wait_before_kill_s": 5,
                      "median": summary, "each": runs}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
