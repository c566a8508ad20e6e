"""Chaos: one job struck by four faults in turn, next to the same job without them, on the process
cluster and on the 3-host Docker cluster (JSON on stdout).

The job is the fault tests' (tests/integration/jobs/stepper.py: three PyTorch-mode workers that
take 0.2 s steps and checkpoint to the cluster's HDFS every 5th, as the fault tests do, each step
signed with the process that took it; only the step log is in a directory the bench reads). The
chaos run strikes, each once every worker has passed the next fifth of its steps:

  user_kill        kill -9 of a worker's training process (its executor reports the exit)
  executor_kill    kill -9 of a worker's executor (its NodeManager sees the container end)
  executor_frozen  SIGSTOP of a worker's executor (heartbeats stop; the AM must decide it is lost)
  am_kill          kill -9 of every process of the AM's container (YARN starts the next attempt)

and reports, next to the fault-free run of the same job on the same cluster:

  wall_s, ratio        submit to exit; chaos wall / fault-free wall (issue 33: <= 1.10), after a
                       short warm-up job; ratio_from_stalls: (fault-free wall + the stalls) /
                       fault-free wall, the same figure without the walls' run-to-run noise
  faults.<name>        stall_s: from the strike until every task stepped again (for the AM kill,
                       the longest pause of any task after it); detected_s where the AM decides
  split_brain          pairs of live copies of one task that both decided to write (must be 0),
                       over every step of the run
  steps_redone         steps taken twice (lost work: a restarted copy redoes what followed its last checkpoint)
  restarts, am_attempts

Usage: bench/chaos.py [--clusters process,docker] [--steps 500]   (starts and stops its own
clusters; the Docker one needs scripts/docker-engine)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration")]

from multihost.faultjob import CKPT_EVERY, CKPT_ROOT  # noqa: E402
from support import JOBS, PYTHON, Background, Cluster, am_processes, executor_pid, history_of, wait_for  # noqa: E402

sys.path.insert(0, str(JOBS))
from stepper import read_steps, split_brain, writers  # noqa: E402

from tony_py.cluster import LocalCluster  # noqa: E402
from tony_py.cluster.docker import DockerCluster  # noqa: E402

FAULTS = ("user_kill", "executor_kill", "executor_frozen", "am_kill")
WORKERS = 3


class Processes:
    """Signals to a node's processes: here (the process cluster) or inside a Docker node."""

    def __init__(self, cluster: Cluster):
        self.cluster = cluster

    def signal(self, host: str, pid: int, sig: int) -> None:
        if self.cluster.launcher is None:
            os.kill(pid, sig)
        else:
            self.cluster.run_on(self.cluster.daemon_on(host), "kill", f"-{sig}", str(pid))

    def kill_am(self, app_id: str) -> None:
        if self.cluster.launcher is None:
            for jvm in am_processes(app_id):
                for p in [jvm, *jvm.children(recursive=True)]:
                    p.kill()
            return
        host = self.cluster.app(app_id)["amHostHttpAddress"].rsplit(":", 1)[0]
        self.cluster.run_on(self.cluster.daemon_on(host), "pkill", "-9", "-f",
                            "io.tonypy.am.ApplicationMaster|tony_py.am", check=False)


class StepperRun:
    def __init__(self, cluster: Cluster, shared: Path, name: str, steps: int):
        self.cluster, self.steps_total = cluster, steps
        self.dir = shared / name  # the step log
        ckpt = f"hdfs://{CKPT_ROOT}/chaos-{cluster.kind}-{name}-{int(time.time())}"
        self.started = time.time()
        self.job = Background(cluster, [  # the test venv's Python (every node has it): the tasks need hdfs-native
            "--src_dir", str(JOBS), "--executes", "stepper.py", "--python_binary_path", PYTHON,
            "--task_params", f"--dir {self.dir} --ckpt-dir {ckpt} --ckpt-every {CKPT_EVERY} --steps {steps} "
                             "--step-time 0.2",
            "--conf", "tony.application.framework=pytorch", "--conf", f"tony.worker.instances={WORKERS}",
            "--conf", "tony.worker.memory=512m", "--conf", "tony.am.memory=512m",
            "--conf", "tony.am.retry-count=5", "--conf", "tony.am.max-attempts=2"])

    def steps(self) -> list[dict]:
        return read_steps(self.dir) if self.dir.exists() else []

    def wait_all_past(self, step: int, after: float = 0.0, timeout: float = 300) -> None:
        """Until every task took `step` in a copy that started after `after`."""
        def past():
            by_task = writers(self.steps())
            return len(by_task) == WORKERS and all(
                any(w.first > after and w.last_step >= step for w in ws) if after else ws[-1].last_step >= step
                for ws in by_task.values())
        wait_for(past, timeout, f"every task past step {step}")

    def latest(self, task: str) -> dict:
        return max((s for s in self.steps() if s["task"] == task), key=lambda s: s["t"])


def strike(run: StepperRun, procs: Processes, fault: str) -> float:
    """The fault, on worker:1 or worker:2 (never the chief's own process: its end is the job's)."""
    task = {"user_kill": "worker:1", "executor_kill": "worker:2", "executor_frozen": "worker:1"}.get(fault)
    if fault == "am_kill":
        at = time.time()
        procs.kill_am(run.job.app_id)
        return at
    step = run.latest(task)
    if fault == "user_kill":
        at = time.time()
        procs.signal(step["host"], step["pid"], signal.SIGKILL)
        return at
    pid = executor_pid(run.cluster, run.job.app_id, step["container"])
    at = time.time()
    procs.signal(step["host"], pid, signal.SIGKILL if fault == "executor_kill" else signal.SIGSTOP)
    return at


def stall_after(steps: list[dict], at: float, resumed: bool) -> float:
    """From the strike until every task wrote a step in a copy started after it (resumed), or the
    longest pause of any task after it."""
    if resumed:
        firsts = [min((w.first for w in ws if w.first > at), default=None) for ws in writers(steps).values()]
        return round(max(firsts) - at, 2) if None not in firsts else None  # (None: a task never resumed)
    longest = 0.0
    for task in {s["task"] for s in steps}:
        times = sorted(s["t"] for s in steps if s["task"] == task and s["t"] >= at - 1)
        longest = max([longest] + [b - a for a, b in zip(times, times[1:]) if b > at])
    return round(longest, 2)


def run_job(cluster: Cluster, shared: Path, name: str, steps: int, chaos: bool) -> dict:
    run = StepperRun(cluster, shared, name, steps)
    procs = Processes(cluster)
    struck: dict[str, float] = {}
    if chaos:
        for i, fault in enumerate(FAULTS, start=1):
            run.wait_all_past(i * steps // 5, after=max(struck.values(), default=0.0) if fault != "am_kill" else 0.0)
            struck[fault] = strike(run, procs, fault)
            print(f"[chaos] {name}: {fault}", file=sys.stderr)
    result = run.job.wait(timeout=900)
    wall = time.time() - run.started
    if result.rc != 0:
        raise RuntimeError(f"{name} ended {result.rc}: {result.err[-2000:]}")
    all_steps = run.steps()
    taken = [(s["task"], s["step"]) for s in all_steps]
    history = history_of(cluster, run.job.app_id)
    out = {"app_id": run.job.app_id, "wall_s": round(wall, 2), "split_brain": len(split_brain(all_steps)),
           "steps_redone": len(taken) - len(set(taken)),
           "restarts": history["restarts_used"] + history["infra_restarts_used"], "am_attempts": history["am_attempts"]}
    if chaos:
        out["faults"] = {f: {"stall_s": stall_after(all_steps, at, resumed=f != "am_kill")} for f, at in struck.items()}
        for f, at in struck.items():  # the AM's decision (bench/faults.py reads the same events)
            decided = [e["ts"] - at for e in history["events"]
                       if e["kind"] in ("RESTART_DECIDED", "AM_FAILOVER") and e["ts"] > at]
            out["faults"][f]["detected_s"] = round(min(decided), 2) if decided else None
    return out


def bring_up(kind: str, workdir: Path):
    if kind == "docker":
        launcher = DockerCluster(workdir)
        launcher.down(purge=True)
        state, _ = launcher.up(nodes=3, timeout=300, log=lambda line: print(line, file=sys.stderr))
        cluster = Cluster("docker", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir),
                          workdir, state.nodemanagers, launcher=launcher)
        return launcher, cluster, Path(state.shared_dir)
    launcher = LocalCluster(workdir)
    launcher.down(purge=True)
    state, _ = launcher.up()
    cluster = Cluster("process", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir), workdir)
    return launcher, cluster, Path(tempfile.mkdtemp(prefix="tony-chaos-"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clusters", default="process,docker")
    parser.add_argument("--steps", type=int, default=500, help="steps per worker (0.2 s each)")
    opts = parser.parse_args()
    results = {"benchmark": "chaos", "cpu_count": os.cpu_count(), "steps": opts.steps, "workers": WORKERS,
               "checkpoint": f"HDFS, every {CKPT_EVERY} steps",
               "faults": list(FAULTS), "clusters": {}}
    ok = True
    for kind in [k for k in opts.clusters.split(",") if k]:
        workdir = ROOT / f".bench-chaos-{kind}"
        row: dict = {}
        launcher = None
        try:
            launcher, cluster, shared = bring_up(kind, workdir)
            # a first job pays what only the first pays (localizing the runtime, the AM's
            # class-data archive on each node): neither measured run should
            run_job(cluster, shared, "warm-up", 10, chaos=False)
            row["fault_free"] = run_job(cluster, shared, "fault-free", opts.steps, chaos=False)
            row["chaos"] = run_job(cluster, shared, "chaos", opts.steps, chaos=True)
            row["ratio"] = round(row["chaos"]["wall_s"] / row["fault_free"]["wall_s"], 3)
            # the same from the stalls alone (the walls also carry the run-to-run noise)
            stalls = sum(f["stall_s"] or 0 for f in row["chaos"]["faults"].values())
            row["stalls_total_s"] = round(stalls, 2)
            row["ratio_from_stalls"] = round((row["fault_free"]["wall_s"] + stalls) / row["fault_free"]["wall_s"], 3)
            row["split_brain_total"] = row["fault_free"]["split_brain"] + row["chaos"]["split_brain"]
        except Exception as exc:  # noqa: BLE001 - a cluster's failure is a result too
            row["error"] = str(exc)[-3000:]
        finally:
            results["clusters"][kind] = row
            print(json.dumps(row), file=sys.stderr)
            clean = "error" not in row and row.get("split_brain_total") == 0
            ok = ok and clean
            if launcher is not None:
                launcher.down(purge=clean)
            if not clean:
                print(f"[chaos] {kind}: logs kept in {workdir}", file=sys.stderr)
    print(json.dumps(results, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
