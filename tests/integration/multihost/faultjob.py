"""A fault test's job on the Docker cluster, and where to find its pieces: jobs/stepper.py
(three workers that step independently, checkpointing every step into the cluster's shared
directory, each step signed with the process that took it), its AM, its executors and the copies
a fault cut off. Used by tests/integration/multihost/test_faults.py and bench/faults.py, so the
figures come from the same jobs and the same faults the tests check."""

from __future__ import annotations

import re
import sys
from pathlib import Path

from support import JOBS, Background, Run, history_of, wait_for

sys.path.insert(0, str(JOBS))
from stepper import read_steps, writers  # noqa: E402

LEASE_S = 10.0  # tony.task.executor.lease-sec's default


class StepperJob:
    """A stepper job on the Docker cluster, and what its steps and its history say. With `held`,
    its tasks exit only once release() was called (stepper.py --until-file): a test that must see
    something happen while the job runs does not race the job's end."""

    def __init__(self, cluster, name: str, *conf: str, steps: int = 150, workers: int = 3, step_time: float = 0.2,
                 held: bool = False):
        self.cluster = cluster
        self.dir = Path(cluster.launcher.load_state().shared_dir) / name
        self.release_file = self.dir / "release" if held else None
        params = f"--dir {self.dir} --steps {steps} --step-time {step_time}"
        if held:
            params += f" --until-file {self.release_file}"
        args = ["--src_dir", str(JOBS), "--executes", "stepper.py", "--python_binary_path", "/usr/bin/python3",
                "--task_params", params,
                "--conf", "tony.application.framework=pytorch", "--conf", f"tony.worker.instances={workers}",
                "--conf", "tony.worker.memory=512m", "--conf", "tony.am.memory=512m",
                "--conf", "tony.am.retry-count=2", "--conf", "tony.am.max-attempts=2"]
        for c in conf:
            args += ["--conf", c]
        self.job = Background(cluster, args)
        self.workers = workers

    @property
    def app_id(self) -> str | None:
        return self.job.app_id

    def steps(self) -> list[dict]:
        return read_steps(self.dir) if self.dir.exists() else []

    def wait_training(self, min_steps: int = 10, timeout: float = 180) -> None:
        def every_task_stepping():
            by_task = writers(self.steps())
            return len(by_task) == self.workers and all(ws[-1].steps >= min_steps for ws in by_task.values())

        wait_for(every_task_stepping, timeout, f"every task to take {min_steps} steps")

    def am_daemon(self) -> str:
        host = self.cluster.app(self.app_id)["amHostHttpAddress"].rsplit(":", 1)[0]
        return self.cluster.daemon_on(host)

    def victim(self) -> tuple[str, str]:
        """(task, daemon) of a worker on a node other than the AM's."""
        am = self.am_daemon()
        for task, ws in sorted(writers(self.steps()).items()):
            daemon = self.cluster.daemon_on(ws[-1].host)
            if daemon != am:
                return task, daemon
        raise AssertionError("every worker runs on the AM's node")

    def release(self) -> None:
        if self.release_file is not None:
            self.release_file.parent.mkdir(parents=True, exist_ok=True)
            self.release_file.touch()

    def finish(self, timeout: float = 300) -> Run:
        self.release()  # (a held job that failed first must not keep its tasks waiting)
        return self.job.wait(timeout=timeout)

    def history(self) -> dict:
        return history_of(self.cluster, self.app_id)


def node_processes(cluster, daemon: str, pattern: str) -> list[str]:
    """Processes inside a node whose command line has `pattern` (its own PID namespace)."""
    out = cluster.run_on(daemon, "ps", "-eo", "pid,args", check=False).stdout
    return [line.strip() for line in out.splitlines()[1:] if pattern in line and "ps -eo" not in line]


def stale_writers(job: StepperJob, fault_at: float, hosts: set[str] | None = None) -> list:
    """The copies that were writing when the fault struck (on these hosts only, if given):
    fault_at is the time before the fault's call (Strike.started)."""
    return [w for ws in writers(job.steps()).values() for w in ws
            if w.first < fault_at and (hosts is None or w.host in hosts)]


def resumed_at(job: StepperJob, fault_at: float, timeout: float = 120) -> float:
    """When every task was stepping again after the fault (each has a writer that started later).
    Waits for the last of them: the restarted gang's copies do not all take their first step at
    once, and the one a test waited for may be ahead of the rest (seen in CI)."""
    def first_after() -> list[float] | None:
        by_task = writers(job.steps())
        firsts = [min((w.first for w in ws if w.first > fault_at), default=None) for ws in by_task.values()]
        return firsts if len(by_task) == job.workers and None not in firsts else None

    return max(wait_for(first_after, timeout, "every task to step on after the fault"))


def wait_resumed(job: StepperJob, fault_at: float, task: str, timeout: float = 120) -> None:
    wait_for(lambda: any(w.first > fault_at for w in writers(job.steps()).get(task, [])), timeout,
             f"{task} to step on in a new copy")


def events_of(history: dict, kind: str, task: str | None = None, **fields) -> list[dict]:
    """The job's recorded events of a kind (for a task; with these fields), in the order the AM
    recorded them."""
    return [e for e in history["events"] if e["kind"] == kind and (task is None or e.get("task") == task)
            and all(e.get(k) == v for k, v in fields.items())]


def host_of(cluster, daemon: str) -> str:
    return cluster.launcher.load_state().node(daemon).hostname


def am_address(cluster, job: StepperJob) -> tuple[str, int]:
    """The AM's host and port, as its task containers were told (TONY_AM_URL)."""
    for files in cluster.task_logs(job.app_id).values():
        m = re.search(r'TONY_AM_URL="http://([^:"]+):(\d+)"', files.get("launch_container.sh", ""))
        if m:
            return m.group(1), int(m.group(2))
    raise AssertionError("no task's launch script names the AM")
