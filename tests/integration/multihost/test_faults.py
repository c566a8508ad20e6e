"""Faults on real wires, and no split brain.

Each test runs jobs/stepper.py (three workers that step independently, checkpointing every
step into the cluster's shared directory, each step signed with the process that took it), cuts
a wire, freezes or kills a node in the middle, and then reads every step written: no two copies
of a task may have been live writers at once (stepper.split_brain), the job must end right, and
the fault must have cost exactly one gang restart.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from support import JOBS, PYTHON, ROOT, Background, Run, wait_for

sys.path.insert(0, str(JOBS))
from stepper import read_steps, split_brain, writers  # noqa: E402

LEASE_S = 10.0  # tony.task.executor.lease-sec's default


class StepperJob:
    """A stepper job on the Docker cluster, and what its steps and its history say."""

    def __init__(self, cluster, tmp_path, *conf: str, steps: int = 150, workers: int = 3, step_time: float = 0.2):
        self.cluster = cluster
        self.dir = Path(cluster.launcher.load_state().shared_dir) / tmp_path.name
        args = ["--src_dir", str(JOBS), "--executes", "stepper.py", "--python_binary_path", "/usr/bin/python3",
                "--task_params", f"--dir {self.dir} --steps {steps} --step-time {step_time}",
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

    def finish(self, timeout: float = 300) -> Run:
        return self.job.wait(timeout=timeout)

    def history(self) -> dict:
        proc = subprocess.run([PYTHON, "-m", "tony_py.cli", "history", "show", self.app_id, "--events", "--json"],
                              cwd=ROOT, env=self.cluster.env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)


def node_processes(cluster, daemon: str, pattern: str) -> list[str]:
    """Processes inside a node whose command line has `pattern` (its own PID namespace)."""
    out = cluster.run_on(daemon, "ps", "-eo", "pid,args", check=False).stdout
    return [line.strip() for line in out.splitlines()[1:] if pattern in line and "ps -eo" not in line]


def stale_writers(job: StepperJob, fault_at: float, hosts: set[str] | None = None) -> list:
    """The copies that were writing when the fault struck (on these hosts only, if given)."""
    return [w for ws in writers(job.steps()).values() for w in ws
            if w.first < fault_at and (hosts is None or w.host in hosts)]


def assert_one_clean_recovery(job: StepperJob, run: Run, fault_at: float, hosts: set[str] | None,
                              stopped_within_s: float = LEASE_S + 1.0, restarts: int = 1) -> dict:
    """The job succeeded after `restarts` gang restarts, every task was stepped by one copy at a
    time, and the copies the fault cut off wrote nothing once their lease could have run out."""
    assert run.rc == 0, run.output[-4000:]
    steps = job.steps()
    assert split_brain(steps) == []
    cut_off = stale_writers(job, fault_at, hosts)
    assert cut_off and all(w.last <= fault_at + stopped_within_s for w in cut_off), \
        [(w.task, w.host, round(w.last - fault_at, 2)) for w in cut_off]
    history = job.history()
    assert history["restarts_used"] == restarts, [e["message"] for e in history["events"]
                                                  if e["kind"] not in ("REGISTERED", "SPEC_SERVED", "TASK_STARTED")]
    return history


def resumed_at(job: StepperJob, fault_at: float) -> float:
    """When every task was stepping again after the fault (each has a writer that started later)."""
    return max(min(w.first for w in ws if w.first > fault_at) for ws in writers(job.steps()).values())


def wait_resumed(job: StepperJob, fault_at: float, task: str, timeout: float = 120) -> None:
    wait_for(lambda: any(w.first > fault_at for w in writers(job.steps()).get(task, [])), timeout,
             f"{task} to step on in a new copy")


def host_of(cluster, daemon: str) -> str:
    return cluster.launcher.load_state().node(daemon).hostname


# ---- a worker's node cut off, frozen, killed ----------------------------------------------------------
def test_a_partitioned_worker_node_is_fenced_and_replaced(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path)
    job.wait_training()
    task, daemon = job.victim()
    fault_at = time.time()
    faults.partition(daemon)
    wait_resumed(job, fault_at, task)  # the job resumes without the node
    assert node_processes(cluster, daemon, "stepper.py") == []  # the cut-off copies stopped on their own
    faults.heal(daemon)
    healed_at = time.time()
    run = job.finish()
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)})
    # nothing of the old attempt came back after the heal
    assert all(w.last < healed_at for w in stale_writers(job, fault_at))


def test_a_frozen_node_thawed_later_writes_nothing(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path)
    job.wait_training()
    task, daemon = job.victim()
    fault_at = time.time()
    faults.freeze(daemon)
    wait_resumed(job, fault_at, task)
    time.sleep(max(0.0, fault_at + 2 * LEASE_S - time.time()))  # frozen well past its lease
    faults.thaw(daemon)  # the node's processes resume where they were, all at once
    thawed_at = time.time()
    wait_for(lambda: node_processes(cluster, daemon, "stepper.py") == [], 30, "the thawed copies to be killed")
    run = job.finish()
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)})
    assert all(w.last < thawed_at for w in stale_writers(job, fault_at))


def test_a_killed_node_is_replaced_well_before_yarn_notices(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path)
    job.wait_training()
    task, daemon = job.victim()
    fault_at = time.time()
    faults.kill(daemon)
    wait_resumed(job, fault_at, task)
    expiry = cluster.launcher.status()["yarn_timers_ms"]["nm_expiry_ms"] / 1000
    assert resumed_at(job, fault_at) - fault_at < expiry - 5  # YARN would call the node lost only then
    run = job.finish()
    faults.restart(daemon)
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)})


# ---- the AM's node cut off ----------------------------------------------------------------------------
def test_a_partitioned_am_node_ends_in_the_next_attempt_without_two_copies(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path, steps=200)
    job.wait_training()
    daemon = job.am_daemon()
    fault_at = time.time()
    faults.partition(daemon)
    # YARN starts the next AM attempt elsewhere after its AM expiry; it takes the job over
    wait_for(lambda: len({w.container for ws in writers(job.steps()).values() for w in ws if w.first > fault_at})
             == job.workers, 180, "every task to step on under the next AM attempt")
    faults.heal(daemon)
    run = job.finish(timeout=300)
    # the copies on the AM's own node heard from it until it stopped answering them, at half the
    # RM's AM expiry (15 s here); the others ran out of lease sooner
    history = assert_one_clean_recovery(job, run, fault_at, None, stopped_within_s=7.5 + LEASE_S + 1.0)
    assert history["am_attempts"] == 2


# ---- wires cut between some hosts only ----------------------------------------------------------------
def test_a_node_cut_from_the_masters_only_has_its_copies_told_to_exit(cluster, faults, tmp_path):
    """Its NodeManager cannot reach the RM (nor the NameNode); its executors still reach the AM.
    YARN calls the node lost; the AM replaces its tasks elsewhere and tells the old executors,
    which still call in, that they are superseded."""
    job = StepperJob(cluster, tmp_path, steps=250)
    job.wait_training()
    task, daemon = job.victim()
    fault_at = time.time()
    for master in ("resourcemanager", "namenode"):
        faults.cut(daemon, master)
    wait_resumed(job, fault_at, task, timeout=150)
    faults.uncut(daemon)
    run = job.finish(timeout=300)
    expiry = 30.0  # the test cluster's NodeManager expiry: only then does YARN report the node lost
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)},
                              stopped_within_s=expiry + 5 + LEASE_S + 1.0)
    logs = [(d / "executor.log").read_text() for d in cluster.container_dirs(job.app_id) if (d / "executor.log").exists()]
    assert any("exiting: superseded" in log for log in logs)


def test_dropping_only_the_ams_port_costs_one_restart(cluster, faults, tmp_path):
    """One node's packets to and from the AM's port are dropped, nothing else: the AM stops that
    node's copies through its NodeManager, and their executors fence them anyway."""
    job = StepperJob(cluster, tmp_path)
    job.wait_training()
    task, daemon = job.victim()
    am_host, am_port = am_address(cluster, job)
    fault_at = time.time()
    faults.cut(daemon, cluster.launcher.load_state().node(cluster.daemon_on(am_host)).address, port=am_port)
    wait_resumed(job, fault_at, task)
    faults.uncut(daemon)
    run = job.finish()
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)})


def am_address(cluster, job: StepperJob) -> tuple[str, int]:
    """The AM's host and port, as its task containers were told (TONY_AM_URL)."""
    for files in cluster.task_logs(job.app_id).values():
        m = re.search(r'TONY_AM_URL="http://([^:"]+):(\d+)"', files.get("launch_container.sh", ""))
        if m:
            return m.group(1), int(m.group(2))
    raise AssertionError("no task's launch script names the AM")


def test_a_lossy_node_costs_no_restart_at_default_heartbeats(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path, steps=120)
    job.wait_training()
    task, daemon = job.victim()
    faults.lose_packets(daemon, 0.30)
    run = job.finish()
    faults.uncut(daemon)
    assert run.rc == 0, run.output[-4000:]
    assert split_brain(job.steps()) == []
    assert job.history()["restarts_used"] == 0


# ---- processes killed and frozen, then the AM killed mid-restart ---------------------------------------
def test_one_restart_per_fault_through_kills_a_freeze_and_an_am_failover(cluster, tmp_path):
    """What an SRE tried on the single-host cluster, where two copies of worker:0 then trained
    side by side for 48 s: a user process killed, an executor killed, an executor frozen, and the
    AM killed a second after it started a replacement for the frozen one."""
    job = StepperJob(cluster, tmp_path, "tony.am.retry-count=5", steps=700, step_time=0.1)
    job.wait_training()
    restarts = lambda: (cluster.am_status(job.app_id) or {}).get("restarts_used")  # noqa: E731

    def in_container(task: str) -> tuple[str, str]:  # (daemon, container) of the task's current copy
        w = writers(job.steps())[task][-1]
        return cluster.daemon_on(w.host), w.container

    # 1. a user process killed: its executor reports the signal; the gang restarts in place
    daemon, _ = in_container("worker:1")
    fault_at = time.time()
    cluster.run_on(daemon, "kill", "-9", str(writers(job.steps())["worker:1"][-1].pid))
    wait_resumed(job, fault_at, "worker:1")
    assert wait_for(restarts, 30, "the restart to show") == 1
    # 2. an executor killed (its process dies with it): one restart, not two
    daemon, container = in_container("worker:2")
    fault_at = time.time()
    cluster.run_on(daemon, "kill", "-9", str(executor_pid(cluster, job, container)))
    wait_resumed(job, fault_at, "worker:2")
    time.sleep(2 * LEASE_S / 2)  # long past the heartbeat expiry: no second restart for it
    assert restarts() == 2
    # 3. an executor frozen (its process runs on), 4. the AM killed just after it replaced it
    daemon, container = in_container("worker:0")
    frozen = executor_pid(cluster, job, container)
    cluster.run_on(daemon, "kill", "-STOP", str(frozen))
    fault_at = time.time()
    wait_for(lambda: any(t["name"] == "worker:0" and t["container_id"] not in (None, container)
                         for t in (cluster.am_status(job.app_id) or {}).get("tasks", [])),
             60, "the AM to start a replacement for worker:0")
    time.sleep(1.0)
    am = job.am_daemon()
    am_pid = next(line.split()[0] for line in node_processes(cluster, am, "io.tonypy.am.ApplicationMaster")
                  if job.app_id in line)
    cluster.run_on(am, "kill", "-9", am_pid)
    run = job.finish(timeout=300)
    cluster.run_on(daemon, "kill", "-CONT", str(frozen), check=False)
    assert run.rc == 0, run.output[-4000:]
    assert split_brain(job.steps()) == []
    history = job.history()
    assert history["am_attempts"] == 2 and history["restarts_used"] == 3, history["diagnostics"]


def executor_pid(cluster, job: StepperJob, container: str) -> int:
    """The executor's pid in its node (its log says it)."""
    for d in cluster.container_dirs(job.app_id):
        if d.name == container:
            return int(re.search(r"executor for \S+ in \S+ \(pid (\d+)\)", (d / "executor.log").read_text()).group(1))
    raise AssertionError(f"no executor log for {container}")


# ---- the DataNode cut off ---------------------------------------------------------------------------
def test_a_datanode_cut_off_for_20_s_costs_history_nothing_and_hangs_nothing(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path, steps=300)
    job.wait_training()
    faults.partition("datanode")
    time.sleep(20)
    faults.heal("datanode")
    healed_at = time.time()
    run = job.finish(timeout=240)
    assert run.rc == 0, run.output[-4000:]
    assert time.time() - healed_at < 120  # the rest of the job, not a wait on HDFS
    assert split_brain(job.steps()) == [] and job.history()["restarts_used"] == 0
    am_log = cluster.am_log(job.app_id)
    assert "job history: a write" in am_log  # it noticed (a write failed, or took long), and said so
    kinds = [e["kind"] for e in job.history()["events"]]
    assert kinds.count("VERDICT") == 1 and "APP_FINISHED" in kinds  # nothing of the history was lost


def test_a_node_that_cannot_reach_the_datanode_gets_a_fast_verdict_in_the_nodemanagers_words(
        cluster, faults, tony, probe_args, tmp_path):
    resource = tmp_path / "weights.bin"
    resource.write_bytes(b"\0" * 1024)  # localized by every task container from HDFS
    daemon = "nodemanager3"
    faults.cut(daemon, "datanode")
    started = time.time()
    # the AM asks for a GPU, so it runs on a GPU node (nm1, nm2); one worker lands on nm3
    run = tony(*probe_args("tony.worker.instances=3", "tony.worker.memory=512m", "tony.am.gpus=1",
                           "tony.worker.placement-spec=notin,node,worker",
                           f"tony.containers.resources={resource}"), timeout=240)
    elapsed = time.time() - started
    faults.uncut(daemon)
    assert run.rc == 1, run.output[-3000:]
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert host_of(cluster, daemon) in diagnostics and "YARN:" in diagnostics, diagnostics
    assert elapsed < 150, elapsed
