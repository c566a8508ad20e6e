"""Faults on real wires, and no split brain.

Each test runs jobs/stepper.py (three workers that step independently, checkpointing to HDFS
once a second, each step signed with the process that took it), cuts a wire, freezes or kills
a node in the middle, and then reads every step written: no two copies of a task may have been
live writers at once (stepper.split_brain), the job must end right, the fault must have cost
exactly what it should of each restart budget (the user's tony.am.retry-count and the
infrastructure's), and every checkpoint is on HDFS, written as the job's user (the hosts share
no checkpoint directory: a copy restarted elsewhere resumes from HDFS or not at all).

Times: a fault's Strike (tony_py/cluster/faults.py) says when its docker call began (a copy
writing before then was cut off by it) and when it returned (the fault was in effect: no
lease was renewed across it after that). Bounds are a lease after the moment the product's own
rule names, never a window typed in: YARN's timers come from the cluster's status, and what
the AM decided and when comes from the events it recorded.
"""

from __future__ import annotations

import re
import time

from multihost.faultjob import (LEASE_S, StepperJob, am_address, checkpoint_of, events_of, host_of,
                                node_processes, stale_writers, wait_resumed)
from stepper import late_landings, split_brain, writers  # jobs/ is on the path once faultjob is imported
from support import Run, executor_pid, history_of, wait_for
from tony_py.am.core.fencing import MARGIN_S
from tony_py.am.main import RM_SILENCE_MIN_S
from tony_py.cluster.faults import Strike

# Noise in the summary of a failed budget check.
_ROUTINE = ("REGISTERED", "SPEC_SERVED", "TASK_STARTED")


def lease_out(renewed_by: float) -> float:
    """The latest a copy whose lease was last renewed by `renewed_by` may decide to write: its
    executor kills the task when the lease runs out; MARGIN_S (the same margin the AM gives
    before a replacement starts) covers that kill and the task's check-then-write."""
    return renewed_by + LEASE_S + MARGIN_S


def spent(history: dict) -> tuple[int, int]:
    """(the user's gang restarts, the infrastructure's)."""
    return history["restarts_used"], history["infra_restarts_used"]


def story(history: dict) -> list[str]:
    return [f"{e['kind']} {e.get('task') or ''} {e['message']}" for e in history["events"] if e["kind"] not in _ROUTINE]


def assert_checkpoints_on_hdfs(job: StepperJob) -> dict[str, dict]:
    """Every task's checkpoints are on HDFS, none in the shared directory; each file is the job's
    user's (tasks act as HADOOP_USER_NAME, set by the AM), and each task's highest attempt holds
    the last step it checkpointed before it logged its last: the chief's the job's last step, a
    worker stopped at the chief's end (one slowed by its node, say) at most an interval behind
    its log. Returns the files (name: owner, step)."""
    assert not (job.dir / "ckpt").exists(), "checkpoints in the shared directory"
    files = job.checkpoints()
    user = job.cluster.app(job.app_id)["user"]
    assert files and {f["owner"] for f in files.values()} == {user}, (user, files)
    for task, copies in writers(job.steps()).items():
        last = max((a for a in range(job.workers * 10) if checkpoint_of(task, a) in files), default=None)
        assert last is not None, (task, files)
        held, logged = files[checkpoint_of(task, last)]["step"], max(w.last_step for w in copies)
        assert 0 <= logged - held < job.ckpt_every and (held % job.ckpt_every == 0 or held == job.total_steps), \
            (task, held, logged, files)
        if task == "worker:0":  # the chief ends the job: it took every step
            assert held == logged == job.total_steps, (task, held, logged)
    return files


def assert_one_clean_recovery(job: StepperJob, run: Run, strike: Strike, hosts: set[str] | None,
                              stopped_by=None, restarts: int = 1, infra_restarts: int = 0,
                              frozen: bool = False) -> dict:
    """The job succeeded after `restarts` gang restarts of the user's budget (tony.am.retry-count)
    and `infra_restarts` of the infrastructure's (YARN reported the node's containers lost, or they
    ended while no AM ran), every task was stepped by one copy at a time (split_brain: the
    safety), and the copies the fault cut off decided no step after `stopped_by` (a time, or a
    function of the job's history; by default a lease after the fault took effect: no call of
    theirs was answered after that). A write in flight when a node froze (decided before,
    landing at the thaw) is no split brain, but only `frozen` faults may leave one, at most one
    per copy the fault cut off."""
    assert run.rc == 0, run.output[-4000:]
    steps = job.steps()
    assert steps, f"no steps in {job.dir}"
    assert split_brain(steps) == []
    cut_off = stale_writers(job, strike.started, hosts)
    assert cut_off, f"no copy was writing on {hosts or 'any host'} when the fault struck"
    landed = late_landings(steps)
    assert len(landed) <= (len(cut_off) if frozen else 0), landed
    # the plain client output names the host of every running task
    assert {int(i) for i, host in re.findall(r"worker:(\d+)\s+RUNNING\s+on (\S+)", run.stdout)
            if host.endswith(".tony.test")} == set(range(job.workers)), run.stdout[-3000:]
    history = job.history()
    bound = stopped_by(history) if callable(stopped_by) else stopped_by or lease_out(strike.in_effect)
    assert all(w.last_checked <= bound for w in cut_off), \
        (round(bound - strike.in_effect, 2), [(w.task, w.host, round(w.last_checked - strike.in_effect, 2))
                                              for w in cut_off])
    assert spent(history) == (restarts, infra_restarts), story(history)
    assert_checkpoints_on_hdfs(job)
    return history


def yarn_timers_s(cluster) -> dict[str, float]:
    """The cluster's YARN timers (NodeManager and AM expiry), as its launcher configured them."""
    return {name.removesuffix("_ms"): ms / 1000 for name, ms in cluster.launcher.status()["yarn_timers_ms"].items()}


def node_lost(history_or_status: dict, host: str) -> dict | None:
    """The AM's record that YARN reported the node on this host LOST."""
    return next((e for e in history_or_status.get("events") or [] if e["kind"] == "NOTE"
                 and str(e.get("node_id", "")).split(":")[0] == host and "is LOST" in e["message"]), None)


# ---- a worker's node cut off, frozen, killed ----------------------------------------------------------
def test_a_partitioned_worker_node_is_fenced_and_replaced(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name)
    job.wait_training()
    task, daemon = job.victim()
    strike = faults.partition(daemon)
    wait_resumed(job, strike.started, task)  # the job resumes without the node
    assert node_processes(cluster, daemon, "stepper.py") == []  # the cut-off copies stopped on their own
    heal = faults.heal(daemon)
    run = job.finish()
    assert_one_clean_recovery(job, run, strike, {host_of(cluster, daemon)})
    # nothing of the old attempt came back after the heal (the list is not empty: checked above)
    assert all(w.last < heal.started for w in stale_writers(job, strike.started))


def test_a_frozen_node_thawed_later_writes_nothing(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name)
    job.wait_training()
    task, daemon = job.victim()
    strike = faults.freeze(daemon)
    wait_resumed(job, strike.started, task)
    time.sleep(max(0.0, strike.in_effect + 2 * LEASE_S - time.time()))  # frozen well past its lease
    thaw = faults.thaw(daemon)  # the node's processes resume where they were, all at once
    wait_for(lambda: node_processes(cluster, daemon, "stepper.py") == [], 30, "the thawed copies to be killed")
    run = job.finish()
    assert_one_clean_recovery(job, run, strike, {host_of(cluster, daemon)}, frozen=True)
    # the thawed copies decided nothing after the thaw (a write in flight at the freeze may land)
    assert all(w.last_checked < thaw.started for w in stale_writers(job, strike.started))


def test_a_killed_node_is_replaced_well_before_yarn_notices(cluster, faults, tmp_path):
    """The AM's own heartbeat expiry finds the dead executor, and its replacement runs, before
    YARN's NodeManager expiry calls the node lost: in the AM's own record, in that order. The job
    is held until the AM has recorded YARN's word, so that word is in its history. It is alice's
    job, so the checkpoints' owner tells the job's user from the nodes' OS user."""
    job = StepperJob(cluster, tmp_path.name, held=True, user="alice")
    job.wait_training()
    task, daemon = job.victim()
    host = host_of(cluster, daemon)
    strike = faults.kill(daemon)
    wait_resumed(job, strike.started, task)
    expiry_s = yarn_timers_s(cluster)["nm_expiry"]
    wait_for(lambda: node_lost(cluster.am_status(job.app_id) or {}, host), 4 * expiry_s,
             "the AM to record that YARN called the node lost")
    run = job.finish()
    faults.restart(daemon)
    history = assert_one_clean_recovery(job, run, strike, {host})
    on_the_node = {w.task for w in stale_writers(job, strike.started, {host})}
    silent = events_of(history, "HEARTBEAT_LOST")
    assert silent and silent[0]["task"] in on_the_node and silent[0]["attempt"] == 0, story(history)
    [decided] = events_of(history, "RESTART_DECIDED")
    assert f"after {silent[0]['task']} " in decided["message"] and "no heartbeat" in decided["message"], decided
    [served] = events_of(history, "SPEC_SERVED", task, attempt=1)
    yarn_word = node_lost(history, host)
    assert yarn_word, story(history)
    assert silent[0]["ts"] <= decided["ts"] <= served["ts"] < yarn_word["ts"], story(history)
    # the killed worker's replacement ran on another host and went on from the checkpoint its
    # predecessor left on HDFS (nothing else could give it: no directory is shared), and so did
    # the rest of the gang: at most one checkpoint interval redone
    assert cluster.app(job.app_id)["user"] == "alice"  # (and so is every checkpoint: assert_one_clean_recovery)
    checkpoints = job.checkpoints()
    for name, copies in writers(job.steps()).items():
        before = [w for w in copies if w.first < strike.started][-1]
        after = next(w for w in copies if w.first > strike.started)
        assert name != task or after.host != host, (name, after.host)
        resumed = checkpoints[checkpoint_of(name, before.attempt)]["step"]
        assert resumed > 0 and after.first_step == resumed + 1, (name, resumed, after)
        assert -1 <= before.last_step - resumed < job.ckpt_every, (name, resumed, before)


# ---- the AM's node cut off ----------------------------------------------------------------------------
def test_a_partitioned_am_node_ends_in_the_next_attempt_without_two_copies(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name, steps=200)
    job.wait_training()
    daemon = job.am_daemon()
    am_host = host_of(cluster, daemon)
    strike = faults.partition(daemon)
    # YARN starts the next AM attempt elsewhere after its AM expiry; it takes the job over
    wait_for(lambda: len({w.container for ws in writers(job.steps()).values() for w in ws
                          if w.first > strike.started}) == job.workers, 180,
             "every task to step on under the next AM attempt")
    faults.heal(daemon)
    run = job.finish(timeout=300)
    # The copies on the AM's own node heard from it until it stopped answering them: once the RM
    # had been silent for half its AM expiry (RM_SILENCE_MIN_S at least; tony_py/am/main.py). The
    # others heard nothing after the partition. The one restart is the infrastructure's however
    # the new attempt first hears of it: tasks whose containers ended while no AM ran went with
    # the AM, and the AM node's own containers are reported aborted.
    answered_s = max(RM_SILENCE_MIN_S, yarn_timers_s(cluster)["am_expiry"] / 2)
    history = assert_one_clean_recovery(job, run, strike, None, stopped_by=lease_out(strike.in_effect + answered_s),
                                        restarts=0, infra_restarts=1)
    elsewhere = [w for w in stale_writers(job, strike.started) if w.host != am_host]
    assert elsewhere and all(w.last_checked <= lease_out(strike.in_effect) for w in elsewhere), \
        [(w.task, w.host, round(w.last_checked - strike.in_effect, 2)) for w in elsewhere]
    assert history["am_attempts"] == 2


# ---- wires cut between some hosts only ----------------------------------------------------------------
def test_a_node_cut_from_the_masters_only_has_its_copies_told_to_exit(cluster, faults, tmp_path):
    """Its NodeManager cannot reach the RM (nor the NameNode); its executors still reach the AM.
    YARN calls the node lost; the AM replaces its tasks elsewhere and tells the old executors,
    which still call in, that they are superseded."""
    job = StepperJob(cluster, tmp_path.name, steps=250)
    job.wait_training()
    task, daemon = job.victim()
    host = host_of(cluster, daemon)
    to_rm, to_nn = faults.cut(daemon, "resourcemanager"), faults.cut(daemon, "namenode")
    strike = Strike(to_rm.started, to_nn.in_effect)
    # only YARN's NodeManager expiry can call the node lost
    wait_resumed(job, strike.started, task, timeout=5 * yarn_timers_s(cluster)["nm_expiry"])
    faults.uncut(daemon)
    run = job.finish(timeout=300)

    def told_to_exit_by(history: dict) -> float:
        """The node's copies heard "continue" only to calls answered before the AM decided the
        restart: a lease after that, they had been told to exit or had fenced themselves."""
        [decided] = events_of(history, "RESTART_DECIDED")
        return lease_out(decided["ts"])

    history = assert_one_clean_recovery(job, run, strike, {host}, stopped_by=told_to_exit_by,
                                        restarts=0, infra_restarts=1)
    # the node's executors still answered: the first word of its loss was YARN's (the node LOST,
    # its containers aborted), so the restart is the infrastructure's, not the user's
    on_the_node = {w.task for w in stale_writers(job, strike.started, {host})}
    assert node_lost(history, host), story(history)
    assert [e for e in events_of(history, "HEARTBEAT_LOST") if e["task"] in on_the_node] == [], story(history)
    # the failure is the first of the node's containers YARN reported (the victim may share the
    # node with another worker, which the gang restart then stops): the infrastructure's
    ended = [e for e in events_of(history, "TASK_FINISHED", attempt=0) if e["task"] in on_the_node]
    assert task in on_the_node and ended, story(history)
    assert [e["failure_kind"] for e in ended if e.get("failure_kind")][:1] == ["infrastructure"], ended
    logs = [(d / "executor.log").read_text() for d in cluster.container_dirs(job.app_id)
            if (d / "executor.log").exists()]
    assert any("exiting: superseded" in log for log in logs), f"{len(logs)} executor logs"


def test_dropping_only_the_ams_port_costs_one_restart(cluster, faults, tmp_path):
    """One node's packets to and from the AM's port are dropped, nothing else: the AM stops that
    node's copies through its NodeManager, and their executors fence them anyway."""
    job = StepperJob(cluster, tmp_path.name)
    job.wait_training()
    task, daemon = job.victim()
    am_host, am_port = am_address(cluster, job)
    strike = faults.cut(daemon, cluster.launcher.load_state().node(cluster.daemon_on(am_host)).address, port=am_port)
    wait_resumed(job, strike.started, task)
    # YARN still counts the node healthy; the AM kept the replacement off it (there it would be cut off too)
    assert writers(job.steps())[task][-1].host != host_of(cluster, daemon)
    faults.uncut(daemon)
    run = job.finish()
    assert_one_clean_recovery(job, run, strike, {host_of(cluster, daemon)})


def test_a_lossy_node_costs_no_restart_at_default_heartbeats(cluster, faults, tmp_path):
    """30 % of the node's packets lost both ways: its executors' heartbeats get through often
    enough, and nothing restarts. The checkpoints stay in the shared directory here: through
    that loss a task's HDFS writes crawl (one took 3 min, another job outlived 300 s, against
    seconds), a matter of storage throughput the other tests here cover on HDFS."""
    job = StepperJob(cluster, tmp_path.name, steps=120, shared_checkpoints=True)
    job.wait_training()
    task, daemon = job.victim()
    faults.lose_packets(daemon, 0.30)
    run = job.finish()
    dropped = faults.dropped(daemon)  # (before the rules and their counters are flushed)
    faults.uncut(daemon)
    assert run.rc == 0, run.output[-4000:]
    assert dropped["INPUT"] > 0 and dropped["OUTPUT"] > 0, dropped  # the loss was real, both ways
    steps = job.steps()
    assert steps and split_brain(steps) == [] and late_landings(steps) == []
    history = job.history()
    assert spent(history) == (0, 0), story(history)


# ---- processes killed and frozen, then the AM killed mid-restart ---------------------------------------
def test_one_restart_per_fault_through_kills_a_freeze_and_an_am_failover(cluster, tmp_path):
    """What an SRE tried on the single-host cluster, where two copies of worker:0 then trained
    side by side for 48 s: a user process killed, an executor killed, an executor frozen, and the
    AM killed as soon as it had started (and recorded) a replacement for the frozen one. Each of
    the first three costs one restart of the user's budget; the AM's loss costs none: the copies
    it left are re-adopted, and the replacement it had started is replaced again (no restart)."""
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
    wait_for(lambda: restarts() == 1, 30, "the restart to show")
    # 2. an executor killed (its process dies with it): one restart, not two (the history's
    # restart decisions, below, show each fault's)
    daemon, container = in_container("worker:2")
    fault_at = time.time()
    cluster.run_on(daemon, "kill", "-9", str(executor_pid(cluster, job.app_id, container)))
    wait_resumed(job, fault_at, "worker:2")
    wait_for(lambda: restarts() == 2, 30, "the restart to show")
    # 3. an executor frozen (its process runs on), 4. the AM killed just after it replaced it
    daemon, container = in_container("worker:0")
    frozen = executor_pid(cluster, job.app_id, container)
    cluster.run_on(daemon, "kill", "-STOP", str(frozen))
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
    steps = job.steps()
    assert steps and split_brain(steps) == [] and late_landings(steps) == []
    history = job.history()
    after = [re.search(r"after (\S+) \(attempt", e["message"]) for e in events_of(history, "RESTART_DECIDED")]
    assert [m and m.group(1) for m in after] == ["worker:1", "worker:2", "worker:0"], story(history)
    assert history["am_attempts"] == 2 and spent(history) == (3, 0), story(history)
    assert_checkpoints_on_hdfs(job)


# ---- the DataNode cut off ---------------------------------------------------------------------------
def test_a_datanode_cut_off_for_20_s_costs_history_nothing_and_hangs_nothing(cluster, faults, tmp_path):
    job = StepperJob(cluster, tmp_path.name, steps=150)  # (its checkpoints wait for the DataNode: it outlives the cut)
    job.wait_training()
    strike = faults.partition("datanode")
    time.sleep(max(0.0, strike.in_effect + 20 - time.time()))
    faults.heal("datanode")
    healed_at = time.time()
    run = job.finish(timeout=240)
    assert run.rc == 0, run.output[-4000:]
    assert time.time() - healed_at < 120  # the rest of the job, not a wait on HDFS
    steps = job.steps()
    assert steps and split_brain(steps) == late_landings(steps) == []
    history = job.history()
    assert spent(history) == (0, 0), story(history)
    am_log = cluster.am_log(job.app_id)
    assert "job history: a write" in am_log  # it noticed (a write failed, or took long), and said so
    kinds = [e["kind"] for e in history["events"]]
    assert kinds.count("VERDICT") == 1 and "APP_FINISHED" in kinds  # nothing of the history was lost
    assert_checkpoints_on_hdfs(job)  # (the checkpoints waited for the DataNode)


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
    history = history_of(cluster, run.app_id)
    assert spent(history) == (0, 0), story(history)  # tony.am.retry-count=0: the verdict, no restart
