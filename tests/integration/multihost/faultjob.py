"""A fault test's job on the Docker cluster, and where to find its pieces: jobs/stepper.py
(three workers that step independently, checkpointing every step to HDFS, each step signed with
the process that took it), its AM, its executors and the copies a fault cut off. Used by
tests/integration/multihost/test_faults.py and bench/faults.py, so the figures come from the
same jobs and the same faults the tests check.

The checkpoints are on HDFS (hdfs:///user/<user>/stepper/<job>, through tony_py.hdfs in each
task), as on a production cluster, where no directory is shared between hosts: a copy restarted
on another host resumes only if HDFS gives it its checkpoint. The cluster's shared directory
holds only what the test itself reads: the step log and the release file of a held job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import requests

from support import JOBS, PYTHON, ROOT, USER, Background, Run, history_of, wait_for

sys.path.insert(0, str(JOBS))
from stepper import checkpoint_name, read_steps, writers  # noqa: E402

LEASE_S = 10.0  # tony.task.executor.lease-sec's default
CKPT_ROOT = f"/user/{USER}/stepper"  # (a job of another user: /user/<user>/stepper)
# A checkpoint per second of steps: HDFS closes a file only once its DataNode reported the
# block, which the client polls for (0.5 s, then longer, in hdfs-native; 0.4 s in Hadoop's own),
# so a checkpoint per 0.2 s step would slow the job 3-fold on a loaded machine. A restarted copy
# redoes fewer steps than one interval.
CKPT_INTERVAL_S = 1.0
STEP_TIME_S = 0.2


def ckpt_every(step_time: float) -> int:
    """Steps per checkpoint at this step time."""
    return max(1, round(CKPT_INTERVAL_S / step_time))


CKPT_EVERY = ckpt_every(STEP_TIME_S)


class StepperJob:
    """A stepper job on the Docker cluster, and what its steps and its history say. With `held`,
    its tasks exit only once release() was called (stepper.py --until-file): a test that must see
    something happen while the job runs does not race the job's end. With `user`, the job is that
    Hadoop user's (HADOOP_USER_NAME at the client; its HDFS home is made first): the tasks, whose
    OS user is the NodeManagers' as this machine's, must act as it on HDFS."""

    def __init__(self, cluster, name: str, *conf: str, steps: int = 150, workers: int = 3,
                 step_time: float = STEP_TIME_S, held: bool = False, user: str | None = None,
                 shared_checkpoints: bool = False):
        self.cluster = cluster
        self.user = user or USER
        if user:
            make_home(cluster, user)
        self.dir = Path(cluster.launcher.load_state().shared_dir) / name  # the step log (the test reads it)
        self.ckpt_dir = f"/user/{self.user}/stepper/{name}"  # on HDFS, relative to fs.defaultFS in the tasks
        self.release_file = self.dir / "release" if held else None
        self.ckpt_every = ckpt_every(step_time)
        # shared_checkpoints: in the shared directory (<dir>/ckpt), for a test whose fault is not
        # about storage but would slow every HDFS write of the node it strikes (packet loss)
        where = "" if shared_checkpoints else f"--ckpt-dir hdfs://{self.ckpt_dir} "
        params = f"--dir {self.dir} {where}--ckpt-every {self.ckpt_every} --steps {steps} --step-time {step_time}"
        if held:
            params += f" --until-file {self.release_file}"
        # the test venv's Python (mounted on every node): the tasks need hdfs-native
        args = ["--src_dir", str(JOBS), "--executes", "stepper.py", "--python_binary_path", PYTHON,
                "--task_params", params,
                "--conf", "tony.application.framework=pytorch", "--conf", f"tony.worker.instances={workers}",
                "--conf", "tony.worker.memory=512m", "--conf", "tony.am.memory=512m",
                "--conf", "tony.am.retry-count=2", "--conf", "tony.am.max-attempts=2"]
        for c in conf:
            args += ["--conf", c]
        self.job = Background(cluster, args, env={"HADOOP_USER_NAME": user} if user else None)
        self.workers = workers
        self.total_steps = steps

    @property
    def app_id(self) -> str | None:
        return self.job.app_id

    def steps(self) -> list[dict]:
        return read_steps(self.dir) if self.dir.exists() else []

    def checkpoints(self) -> dict[str, dict]:
        """The job's checkpoint files on HDFS by name, each with its owner and the step it holds
        (read through WebHDFS: another client than the tasks')."""
        nn = self.cluster.nn_web
        listing = requests.get(f"{nn}/webhdfs/v1{self.ckpt_dir}", params={"op": "LISTSTATUS", "user.name": USER},
                               timeout=10)
        if listing.status_code == 404:
            return {}
        out = {}
        for status in listing.json()["FileStatuses"]["FileStatus"]:
            name = status["pathSuffix"]
            text = requests.get(f"{nn}/webhdfs/v1{self.ckpt_dir}/{name}", params={"op": "OPEN", "user.name": USER},
                                timeout=10).text if name.endswith(".json") else ""
            out[name] = {"owner": status["owner"], "step": json.loads(text)["step"] if text else None}
        return out

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
        if self.user == USER:
            return history_of(self.cluster, self.app_id)
        # under the job's user's home, read as this machine's user (HDFS's superuser here)
        proc = subprocess.run([PYTHON, "-m", "tony_py.cli", "history", "--conf",
                               f"tony.history.location=/user/{self.user}/.tony/history", "show", self.app_id,
                               "--events", "--json"], cwd=ROOT, env=self.cluster.env(), capture_output=True,
                              text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return json.loads(proc.stdout)


def make_home(cluster, user: str) -> None:
    """/user/<user>, the user's own (made as this machine's user, HDFS's superuser here)."""
    for op, extra in (("MKDIRS", {}), ("SETOWNER", {"owner": user})):
        resp = requests.put(f"{cluster.nn_web}/webhdfs/v1/user/{user}", params={"op": op, "user.name": USER, **extra},
                            timeout=10)
        assert resp.ok, (op, resp.status_code, resp.text[:500])


def checkpoint_of(task: str, attempt: int) -> str:
    return f"{checkpoint_name(task)}.{attempt}.json"


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
