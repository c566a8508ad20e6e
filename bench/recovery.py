"""Recovery from failures, for a 2-worker PyTorch DDP job (JSON on stdout).

Two scenarios, each measured from the moment of the kill:
  user_process_kill   kill -9 of worker:1's training process (restart in place)
  nodemanager_kill    kill -9 of the NodeManager running both workers (new containers on the
                      other node; YARN itself needs yarn.nm.liveness-monitor.expiry-interval-ms,
                      10 s on the local cluster, to declare the node lost)
and for each: detected (the AM decided to restart), all_running (every task's user process
started again), first_step (the first training step after the restart, from the task's log).
The baseline is TonY 0.5.3's detection floor for a dead executor: heartbeat interval 1 s x 25
missed beats = 25 s (TonY's code; TonY itself cannot be built here: its build needs Gradle).
Usage: bench/recovery.py [--repeat 1] [--workdir DIR]   (starts and stops its own cluster)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py.cluster import LocalCluster  # noqa: E402

PYTHON = sys.executable
TONY_DETECTION_FLOOR_S = 25.0


class Job:
    def __init__(self, conf_dir: str, *args: str):
        env = dict(os.environ, HADOOP_CONF_DIR=conf_dir)
        self.log = tempfile.TemporaryFile("w+")
        self.proc = subprocess.Popen([PYTHON, "-m", "tony_py.submit", *args], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT, text=True)
        self.app_id = None
        self.status: dict = {}

    def output(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def poll_status(self, rm_web: str) -> dict:
        if self.app_id is None:
            m = re.search(r"submitted (application_\d+_\d+)", self.output())
            self.app_id = m.group(1) if m else None
        if self.app_id:
            app = requests.get(f"{rm_web}/ws/v1/cluster/apps/{self.app_id}", timeout=5).json()["app"]
            if app["state"] == "RUNNING" and app.get("trackingUrl"):
                try:
                    self.status = requests.get(app["trackingUrl"].rstrip("/") + "/status.json", timeout=3).json()
                except (requests.RequestException, ValueError):
                    pass
        return self.status

    def wait_until(self, rm_web: str, predicate, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.poll_status(rm_web)
            if status and predicate(status):
                return status
            if self.proc.poll() is not None:
                raise RuntimeError(f"the job ended while waiting for {what}:\n{self.output()[-3000:]}")
            time.sleep(0.2)
        raise RuntimeError(f"timed out waiting for {what}")

    def finish(self, rm_web: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None and time.monotonic() < deadline:
            self.poll_status(rm_web)  # keep the last task table and timeline
            time.sleep(0.2)
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(60)
        if self.proc.returncode != 0:
            raise RuntimeError(f"the job failed:\n{self.output()[-3000:]}")


def all_running(attempt: int):
    return lambda s: s["tasks"] and all(t["state"] == "RUNNING" and t["attempt"] == attempt for t in s["tasks"])


def task_logs(workdir: Path, app_id: str) -> dict[str, dict[str, str]]:
    out = {}
    for cdir in workdir.glob(f"data/nm*/logs/{app_id}/container_*"):
        files = {p.name: p.read_text(errors="replace") for p in cdir.iterdir() if p.is_file()}
        m = re.search(r"executor for (\S+)", files.get("executor.log", ""))
        if m:
            out.setdefault(m.group(1), {}).update(files)
    return out


def pytorch_job(conf_dir: str, ckpt: str, *conf: str, epochs: int = 10) -> Job:
    args = ["--src_dir", str(ROOT / "examples/pytorch_ddp"), "--executes", "train.py",
            "--python_binary_path", PYTHON, "--conf_file", str(ROOT / "examples/pytorch_ddp/tony.xml"),
            "--task_params", f"--checkpoint_dir {ckpt} --epochs {epochs} --epoch_sleep 1"]
    for c in conf:
        args += ["--conf", c]
    return Job(conf_dir, *args)


def measure(job: Job, killed_at: float, workdir: Path, rm_web: str) -> dict:
    job.wait_until(rm_web, all_running(1), 180, "the restarted tasks")
    job.finish(rm_web)
    timeline = job.status.get("timeline", {})
    logs = task_logs(workdir, job.app_id)
    first_steps = [float(m.group(1)) for files in logs.values()
                   for m in [re.search(r"first step done at ([0-9.]+)", files.get("attempt-1.stdout", ""))] if m]
    return {
        "detected_s": round(timeline["restart_decided@1"] - killed_at, 3),
        "all_running_s": round(timeline["all_tasks_started@1"] - killed_at, 3),
        "first_step_s": round(max(first_steps) - killed_at, 3) if first_steps else None,
    }


def user_process_kill(state, workdir: Path) -> dict:
    with tempfile.TemporaryDirectory() as ckpt:
        job = pytorch_job(state.conf_dir, ckpt, "tony.am.retry-count=1")
        job.wait_until(state.rm_web, all_running(0), 180, "the workers")
        deadline = time.monotonic() + 120
        while "epoch 1 " not in task_logs(workdir, job.app_id).get("worker:1", {}).get("attempt-0.stdout", ""):
            if time.monotonic() > deadline:
                raise RuntimeError("worker:1 never reached epoch 1")
            time.sleep(0.2)
        pid = int(re.search(r"started pid (\d+)", task_logs(workdir, job.app_id)["worker:1"]["executor.log"]).group(1))
        killed_at = time.time()
        os.kill(pid, signal.SIGKILL)
        return measure(job, killed_at, workdir, state.rm_web)


def nodemanager_kill(cluster: LocalCluster, state, workdir: Path) -> dict:
    """A filler job holds the GPU node, so both workers start on nodemanager2; the AM asks for
    a GPU, so it runs on nodemanager1. Then nodemanager2 dies."""
    with tempfile.TemporaryDirectory() as ckpt, tempfile.TemporaryDirectory() as src:
        (Path(src) / "hold.py").write_text("import time\nwhile True:\n    time.sleep(1)\n")
        filler = Job(state.conf_dir, "--src_dir", src, "--executes", "hold.py", "--python_binary_path", "python3",
                     "--conf", "tony.application.framework=standalone", "--conf", "tony.worker.instances=1",
                     "--conf", "tony.worker.gpus=1", "--conf", "tony.worker.memory=10g", "--conf", "tony.am.memory=512m")
        filler.wait_until(state.rm_web, all_running(0), 120, "the filler")
        # long enough to outlast YARN's 10 s node expiry
        job = pytorch_job(state.conf_dir, ckpt, "tony.am.retry-count=1", "tony.am.gpus=1", epochs=40)
        job.wait_until(state.rm_web, all_running(0), 180, "the workers")
        filler.proc.send_signal(signal.SIGINT)
        filler.proc.wait(60)
        time.sleep(3)  # some training on the doomed node
        killed_at = time.time()
        cluster.kill_daemon("nodemanager2")
        try:
            return measure(job, killed_at, workdir, state.rm_web)
        finally:
            cluster.restart_daemon("nodemanager2")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--workdir", default=str(ROOT / ".bench-cluster"))
    opts = parser.parse_args()
    cluster = LocalCluster(opts.workdir)
    cluster.down(purge=True)
    state, _ = cluster.up()
    workdir = Path(opts.workdir)
    results = {"benchmark": "recovery", "job": "pytorch_ddp, 2 workers",
               "baseline_tony_0.5.3_detection_floor_s": TONY_DETECTION_FLOOR_S,
               "nm_expiry_s": 10.0, "scenarios": {}}
    try:
        for name, run in (("user_process_kill", lambda: user_process_kill(state, workdir)),
                          ("nodemanager_kill", lambda: nodemanager_kill(cluster, state, workdir))):
            runs = [run() for _ in range(opts.repeat)]
            results["scenarios"][name] = {
                "median_s": {k: statistics.median(r[k] for r in runs) for k in runs[0] if runs[0][k] is not None},
                "each": runs,
            }
        kill = results["scenarios"]["user_process_kill"]["median_s"]["detected_s"]
        results["detection_vs_tony_ratio"] = round(kill / TONY_DETECTION_FLOOR_S, 4)
    finally:
        cluster.down(purge=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
