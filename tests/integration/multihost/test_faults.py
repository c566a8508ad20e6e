"""Faults on real wires, and no split brain.

Each test runs jobs/stepper.py (three workers that step independently, checkpointing every
step into the cluster's shared directory, each step signed with the process that took it), cuts
a wire, freezes or kills a node in the middle, and then reads every step written: no two copies
of a task may have been live writers at once (stepper.split_brain), the job must end right, and
the fault must have cost exactly one gang restart.
"""

from __future__ import annotations

import re
import time

from multihost.faultjob import (LEASE_S, StepperJob, am_address, host_of, node_processes, resumed_at, stale_writers,
                                wait_resumed)
from stepper import late_landings, split_brain, writers  # jobs/ is on the path once faultjob is imported
from support import Run, executor_pid, wait_for
from tony_py.am.core.fencing import MARGIN_S


def assert_one_clean_recovery(job: StepperJob, run: Run, fault_at: float, hosts: set[str] | None,
                              stopped_within_s: float = LEASE_S, restarts: int = 1,
                              infra_restarts: int = 0, frozen: bool = False) -> dict:
    """The job succeeded after `restarts` gang restarts of the user's budget (tony.am.retry-count)
    and `infra_restarts` of the infrastructure's (YARN reported the node's containers lost, or they
    ended while no AM ran), every task was stepped by one copy at a time (split_brain: the
    safety), and the copies the fault cut off took no step once their lease could have run out:
    a lease-check before a step at most `stopped_within_s` after the fault, plus MARGIN_S for the
    fault's own taking effect (a `docker exec` of iptables on a loaded machine) and the task's
    check-then-write (the AM gives the same margin before a replacement starts). A write in
    flight when a node froze (decided before, landing at the thaw) is no split brain, but only
    `frozen` faults may leave one, at most one per copy the fault cut off."""
    assert run.rc == 0, run.output[-4000:]
    steps = job.steps()
    assert split_brain(steps) == []
    landed = late_landings(steps)
    assert len(landed) <= (len(stale_writers(job, fault_at, hosts)) if frozen else 0), landed
    # the plain client output names the host of every running task
    assert {int(i) for i, host in re.findall(r"worker:(\d+)\s+RUNNING\s+on (\S+)", run.stdout)
            if host.endswith(".tony.test")} == set(range(job.workers)), run.stdout[-3000:]
    cut_off = stale_writers(job, fault_at, hosts)
    assert cut_off and all(w.last_checked <= fault_at + stopped_within_s + MARGIN_S for w in cut_off), \
        [(w.task, w.host, round(w.last_checked - fault_at, 2)) for w in cut_off]
    history = job.history()
    spent = (history["restarts_used"], history["infra_restarts_used"])
    assert spent == (restarts, infra_restarts), [e["message"] for e in history["events"]
                                                 if e["kind"] not in ("REGISTERED", "SPEC_SERVED", "TASK_STARTED")]
    return history


# ---- a worker's node cut off, frozen, killed ----------------------------------------------------------
def test_a_partitioned_worker_node_is_fenced_and_replaced(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name)
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
    job = StepperJob(cluster, tmp_path.name)
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
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)}, frozen=True)
    # the thawed copies decided nothing after the thaw (a write in flight at the freeze may land)
    assert all(w.last_checked < thawed_at for w in stale_writers(job, fault_at))


def test_a_killed_node_is_replaced_well_before_yarn_notices(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name)
    job.wait_training()
    task, daemon = job.victim()
    fault_at = time.time()
    faults.kill(daemon)
    wait_resumed(job, fault_at, task)
    expiry = cluster.launcher.status()["yarn_timers_ms"]["nm_expiry_ms"] / 1000
    assert resumed_at(job, fault_at) - fault_at < expiry  # YARN would call the node lost only then
    run = job.finish()
    faults.restart(daemon)
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)})


# ---- the AM's node cut off ----------------------------------------------------------------------------
def test_a_partitioned_am_node_ends_in_the_next_attempt_without_two_copies(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name, steps=200)
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
    # RM's AM expiry (15 s here); the others ran out of lease sooner. The one restart is the
    # infrastructure's however the new attempt first hears of it: tasks whose containers ended
    # while no AM ran went with the AM, and the AM node's own containers are reported aborted
    history = assert_one_clean_recovery(job, run, fault_at, None, stopped_within_s=7.5 + LEASE_S,
                                        restarts=0, infra_restarts=1)
    assert history["am_attempts"] == 2


# ---- wires cut between some hosts only ----------------------------------------------------------------
def test_a_node_cut_from_the_masters_only_has_its_copies_told_to_exit(cluster, faults, tmp_path):
    """Its NodeManager cannot reach the RM (nor the NameNode); its executors still reach the AM.
    YARN calls the node lost; the AM replaces its tasks elsewhere and tells the old executors,
    which still call in, that they are superseded."""
    job = StepperJob(cluster, tmp_path.name, steps=250)
    job.wait_training()
    task, daemon = job.victim()
    fault_at = time.time()
    for master in ("resourcemanager", "namenode"):
        faults.cut(daemon, master)
    wait_resumed(job, fault_at, task, timeout=150)
    faults.uncut(daemon)
    run = job.finish(timeout=300)
    expiry = 30.0  # the test cluster's NodeManager expiry: only then does YARN report the node lost
    # the node's executors still answered: the first word of its loss was YARN's (its containers
    # aborted), so the restart is the infrastructure's, not the user's
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)},
                              stopped_within_s=expiry + 5 + LEASE_S, restarts=0, infra_restarts=1)
    logs = [(d / "executor.log").read_text() for d in cluster.container_dirs(job.app_id) if (d / "executor.log").exists()]
    assert any("exiting: superseded" in log for log in logs)


def test_dropping_only_the_ams_port_costs_one_restart(cluster, faults, tmp_path):
    """One node's packets to and from the AM's port are dropped, nothing else: the AM stops that
    node's copies through its NodeManager, and their executors fence them anyway."""
    job = StepperJob(cluster, tmp_path.name)
    job.wait_training()
    task, daemon = job.victim()
    am_host, am_port = am_address(cluster, job)
    fault_at = time.time()
    faults.cut(daemon, cluster.launcher.load_state().node(cluster.daemon_on(am_host)).address, port=am_port)
    wait_resumed(job, fault_at, task)
    # YARN still counts the node healthy; the AM kept the replacement off it (there it would be cut off too)
    assert writers(job.steps())[task][-1].host != host_of(cluster, daemon)
    faults.uncut(daemon)
    run = job.finish()
    assert_one_clean_recovery(job, run, fault_at, {host_of(cluster, daemon)})


def test_a_lossy_node_costs_no_restart_at_default_heartbeats(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name, steps=120)
    job.wait_training()
    task, daemon = job.victim()
    faults.lose_packets(daemon, 0.30)
    run = job.finish()
    faults.uncut(daemon)
    assert run.rc == 0, run.output[-4000:]
    assert split_brain(job.steps()) == [] and late_landings(job.steps()) == []
    assert job.history()["restarts_used"] == 0


# ---- processes killed and frozen, then the AM killed mid-restart ---------------------------------------
def test_one_restart_per_fault_through_kills_a_freeze_and_an_am_failover(cluster, tmp_path):
    """What an SRE tried on the single-host cluster, where two copies of worker:0 then trained
    side by side for 48 s: a user process killed, an executor killed, an executor frozen, and the
    AM killed as soon as it had started (and recorded) a replacement for the frozen one."""
    job = StepperJob(cluster, tmp_path.name, "tony.am.retry-count=5", steps=700, step_time=0.1)
    job.wait_training()

    def restarts() -> int:
        """The AM's restart count (a status read that failed under load is read again)."""
        return wait_for(lambda: cluster.am_status(job.app_id), 30, "the AM's status")["restarts_used"]

    def in_container(task: str) -> tuple[str, str]:  # (daemon, container) of the task's current copy
        w = writers(job.steps())[task][-1]
        return cluster.daemon_on(w.host), w.container

    # 1. a user process killed: its executor reports the signal; the gang restarts in place
    daemon, _ = in_container("worker:1")
    fault_at = time.time()
    cluster.run_on(daemon, "kill", "-9", str(writers(job.steps())["worker:1"][-1].pid))
    wait_resumed(job, fault_at, "worker:1")
    assert wait_for(lambda: restarts() == 1, 30, "the restart to show")
    # 2. an executor killed (its process dies with it): one restart, not two
    daemon, container = in_container("worker:2")
    fault_at = time.time()
    cluster.run_on(daemon, "kill", "-9", str(executor_pid(cluster, job.app_id, container)))
    wait_resumed(job, fault_at, "worker:2")
    time.sleep(2 * LEASE_S / 2)  # long past the heartbeat expiry: no second restart for it
    assert restarts() == 2
    # 3. an executor frozen (its process runs on), 4. the AM killed just after it replaced it
    daemon, container = in_container("worker:0")
    frozen = executor_pid(cluster, job.app_id, container)
    cluster.run_on(daemon, "kill", "-STOP", str(frozen))
    fault_at = time.time()
    # the AM has started a replacement for worker:0 and its snapshot (what the next attempt
    # reads) already says so
    wait_for(lambda: (s := cluster.am_status(job.app_id)) and s.get("snapshot_current")
             and any(t["name"] == "worker:0" and t["container_id"] not in (None, container) for t in s["tasks"]),
             60, "the AM to start a replacement for worker:0 and record it")
    am = job.am_daemon()
    am_pid = next(line.split()[0] for line in node_processes(cluster, am, "io.tonypy.am.ApplicationMaster")
                  if job.app_id in line)
    cluster.run_on(am, "kill", "-9", am_pid)
    run = job.finish(timeout=300)
    cluster.run_on(daemon, "kill", "-CONT", str(frozen), check=False)
    assert run.rc == 0, run.output[-4000:]
    assert split_brain(job.steps()) == [] and late_landings(job.steps()) == []
    history = job.history()
    assert history["am_attempts"] == 2 and history["restarts_used"] == 3, history["diagnostics"]


# ---- the DataNode cut off ---------------------------------------------------------------------------
def test_a_datanode_cut_off_for_20_s_costs_history_nothing_and_hangs_nothing(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name, steps=300)
    job.wait_training()
    faults.partition("datanode")
    time.sleep(20)
    faults.heal("datanode")
    healed_at = time.time()
    run = job.finish(timeout=240)
    assert run.rc == 0, run.output[-4000:]
    assert time.time() - healed_at < 120  # the rest of the job, not a wait on HDFS
    assert split_brain(job.steps()) == late_landings(job.steps()) == [] and job.history()["restarts_used"] == 0
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
