"""A job that must ride through the cluster's own maintenance, and the check that it did. Used by
tests/integration/ha (and the lone-RM and node tests beside the one-host cluster's) and by
bench/maintenance.py, so the figures come from the same jobs and the same faults the tests check.

The job is jobs/stepper.py: workers that each take numbered steps, every step signed with the
process and container that took it. "Survived" is measured, not inferred: one AM attempt in
YARN's own record, no gang restart of either budget in the job's history, every task stepped by
the one process it started with (same container, same pid), its steps 1..N with none missing
or repeated, the client's exit 0, and the client never killing anything.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import requests

from support import JOBS, PYTHON, Background, Run, history_of, wait_for

sys.path.insert(0, str(JOBS))
from stepper import read_steps, writers  # noqa: E402


class SteppingJob:
    """A stepper job on a one-host cluster, writing its steps under `out_dir`."""

    def __init__(self, cluster, out_dir: Path, *conf: str, steps: int = 300, step_time: float = 0.1,
                 workers: int = 2, env: dict | None = None):
        self.cluster = cluster
        self.dir = Path(out_dir)
        self.workers = workers
        self.total_steps = steps
        args = ["--src_dir", str(JOBS), "--executes", "stepper.py", "--python_binary_path", PYTHON,
                "--task_params", f"--dir {self.dir} --steps {steps} --step-time {step_time}",
                "--conf", "tony.application.framework=pytorch", "--conf", f"tony.worker.instances={workers}",
                "--conf", "tony.worker.memory=512m", "--conf", "tony.am.memory=512m"]
        for c in conf:
            args += ["--conf", c]
        self.job = Background(cluster, args, env=env)
        self.started = time.time()

    @property
    def app_id(self) -> str | None:
        return self.job.app_id

    def steps(self) -> list[dict]:
        return read_steps(self.dir) if self.dir.exists() else []

    def wait_stepping(self, min_steps: int = 5, timeout: float = 180) -> None:
        """Until every task has taken min_steps more steps than it had when this was called."""
        before = {task: ws[-1].last_step for task, ws in writers(self.steps()).items()}

        def every_task_stepping():
            by_task = writers(self.steps())
            return len(by_task) == self.workers and all(
                ws[-1].last_step >= before.get(task, 0) + min_steps for task, ws in by_task.items())

        wait_for(every_task_stepping, timeout, f"every task to take {min_steps} more steps")

    def finish(self, timeout: float = 300) -> Run:
        return self.job.wait(timeout=timeout)


def am_attempts(cluster, app_id: str) -> int:
    resp = requests.get(f"{cluster.rm()}/ws/v1/cluster/apps/{app_id}/appattempts", timeout=10).json()
    return len((resp.get("appAttempts") or {}).get("appAttempt") or [])


def longest_stall(job: SteppingJob) -> float:
    """The longest time any task went without a step (its training stalled), in seconds."""
    times: dict[str, list[float]] = {}
    for step in job.steps():
        times.setdefault(step["task"], []).append(step["t"])
    return max((b - a for ts in times.values() for a, b in zip(sorted(ts), sorted(ts)[1:])), default=0.0)


def survival_problems(cluster, job: SteppingJob, run: Run) -> list[str]:
    """What shows the job did not ride through untouched (empty: it did)."""
    problems = []
    if run.rc != 0:
        problems.append(f"client exit {run.rc}: {run.output[-3000:]}")
    if "killing" in run.stdout or "could not kill" in run.stderr:
        problems.append(f"the client killed (or tried to kill) the job: {run.output[-2000:]}")
    attempts = am_attempts(cluster, run.app_id)
    if attempts != 1:
        problems.append(f"{attempts} AM attempts")
    history = history_of(cluster, run.app_id)
    spent = (history["restarts_used"], history["infra_restarts_used"])
    if spent != (0, 0):
        problems.append(f"gang restarts (user's, infrastructure's): {spent}")
    by_task = writers(job.steps())
    if len(by_task) != job.workers:
        problems.append(f"{len(by_task)} tasks stepped, not {job.workers}")
    for task, ws in sorted(by_task.items()):
        if len(ws) != 1:
            problems.append(f"{task} was stepped by {len(ws)} processes: "
                            f"{[(w.container, w.pid, w.first_step, w.last_step) for w in ws]}")
        numbers = [s["step"] for s in sorted(job.steps(), key=lambda s: s["t"]) if s["task"] == task]
        if numbers != list(range(1, job.total_steps + 1)):
            problems.append(f"{task}'s steps are not 1..{job.total_steps} once each "
                            f"({len(numbers)} lines, first {numbers[:3]}, last {numbers[-3:]})")
    return problems
