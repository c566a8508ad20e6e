"""AM fail-over, the coordinator's side: the snapshot one AM attempt leaves in the staging dir,
and how the next attempt takes the job over from it (failover.plan_adoption decides what happens
to each task; this applies it). Runs under the job's lock.
"""

from __future__ import annotations

from typing import Callable

from tony_py.am.core import events as ev
from tony_py.am.core.failover import SNAPSHOT_VERSION, AmSnapshot, TaskRecord, Verdict, plan_adoption
from tony_py.am.core.policy import Decision
from tony_py.am.core.recovery import Recovery
from tony_py.am.core.state import JobCore, JobState
from tony_py.am.core.tasks import Copy, Task
from tony_py.job.records import FailureKind, TaskState

# How long re-adopted executors may stay silent while they learn the new AM's address.
ADOPTION_GRACE_S = 20.0


def snapshot(job: JobCore, auth_last_seen: Callable[[], dict[str, int]]) -> AmSnapshot:
    """What a later AM attempt needs to take over."""
    job.dirty = False
    return AmSnapshot(
        version=SNAPSHOT_VERSION,
        state=job.state.value,
        attempt=job.attempt,
        restarts_used=job.restarts_used,
        infra_restarts_used=job.infra_restarts_used,
        preemptions=job.preemptions,
        cluster_view=job.cluster_view,
        started_at=job.started_at,
        chief_done_at=job.chief_done_at,
        tasks={name: TaskRecord(
            state=t.state, attempt=t.attempt, container=t.container, last_container=t.last_container,
            address=t.address, tb_port=t.tb_port, control_url=t.control_url, exit_code=t.exit_code,
            signal=t.signal, failure=t.failure, released=t.released, tracked=t.tracked, gpus=list(t.gpus))
            for name, t in job.tasks.items()},
        failures=list(job.failures),
        node_failures=dict(job.node_failures),
        blacklisted=sorted(job.blacklisted),
        verdict=Verdict(job.final_status, job.decision.action, job.decision.message) if job.decision else None,
        stage=job.stage,
        callbacks=dict(job.callbacks),
        tensorboard_url=job.tensorboard_url,
        auth_last_seen=auth_last_seen(),
    )


def adopt(job: JobCore, recovery: Recovery, snap: AmSnapshot, live_containers: list[dict]) -> list[Task]:
    """Take over from an earlier AM attempt. Returns the tasks whose executors must be told where
    the new AM is."""
    cluster = recovery.cluster
    plan = plan_adoption(snap, {c["id"] for c in live_containers})
    recovery.take_over(snap)
    fence_earlier_copies(job)
    for node in snap.blacklisted:
        cluster.blacklist(node)
    for name, record in snap.tasks.items():
        task = job.tasks.get(name)
        if task is not None:
            _restore_task(job, cluster, task, record, plan)
    for container_id in plan.strangers:  # kept by YARN but unknown to the snapshot
        cluster.stop(container_id)
    job.events.record(ev.AM_FAILOVER, f"took over from an earlier AM attempt: {len(plan.readopt)} task(s) "
                                      f"re-adopted, {len(plan.lost)} lost while no AM was running")
    if snap.verdict:
        for name in plan.lost:
            job.tasks[name].enter(TaskState.STOPPED, "its container ended while no AM was running, after the verdict")
        recovery.finish(Decision(snap.verdict.action, snap.verdict.message), status=snap.verdict.status)
        return []
    if snap.state in (JobState.RUNNING.value, JobState.RESTARTING.value) and snap.state != job.state.value:
        job.enter(JobState(snap.state), f"resumed {snap.state} from the earlier AM attempt")
    # Several tasks lost at once are one event: record them all, decide once. They went with the
    # earlier attempt (policy.is_infrastructure).
    lost = [job.tasks[name] for name in plan.lost if name in job.tasks]
    for task in lost:
        recovery.fail(task, FailureKind.LOST, "its container ended while no AM was running",
                      container=task.last_container, apply=False, lost_with_am=True)
    if lost:
        recovery.after_failure(lost[0])
    job.dirty = True
    return [job.tasks[name] for name in plan.readopt if job.tasks[name].container is not None]


def fence_earlier_copies(job: JobCore) -> None:
    """No new copy of any task starts until a lease after this attempt started: the earlier
    attempt was in contact with its executors until it died (or, cut off from the RM, until it
    stopped answering them), no later than now, and may have started copies that neither its
    snapshot nor YARN shows yet. A copy that is re-adopted runs on; only new ones wait."""
    for name in job.tasks:
        job.fences.fence(name, f"{name} of an earlier AM attempt", job.clock(), "an earlier AM attempt's copy")


def _restore_task(job: JobCore, cluster, task: Task, record: TaskRecord, plan) -> None:
    now = job.clock()
    name = task.name
    task.address, task.tb_port = record.address, record.tb_port
    task.exit_code, task.signal, task.failure = record.exit_code, record.signal, record.failure
    task.tracked = record.tracked
    task.last_container = record.last_container
    if name in plan.readopt:
        served = record.state in (TaskState.RUNNING, TaskState.REGISTERED)
        task.restore(record.attempt, record.state, Copy.SERVED if served else Copy.STARTED, record.released,
                     "re-adopted: its container outlived the earlier AM attempt")
        task.container = record.container
        task.gpus = list(record.gpus)
        if record.gpus:
            job.gpus.record(record.container.node_id, record.container.id, record.gpus)
        task.control_url = record.control_url
        task.launched_at = now
        task.last_heartbeat = now + ADOPTION_GRACE_S  # while it learns the new address
        task.adopted_at = now  # until its executor first reaches this attempt (protocol.lookup)
        # Not heard from yet by this attempt; for its fence (all copies are fenced from this
        # attempt's start anyway) and for keeping it in a restart, it counts as heard from now.
        task.last_contact = now
        if record.state == TaskState.RUNNING:
            task.started_at = task.last_progress = now
    elif name in plan.replace:  # launched but never registered: cheaper to replace
        cluster.stop(record.container.id)
        task.restore(record.attempt, TaskState.PENDING, Copy.NONE, False,
                     "launched by the earlier AM attempt and never registered: replaced")
    elif name in plan.finished:
        task.restore(record.attempt, record.state, Copy.NONE, record.released, "finished under the earlier AM attempt")
    elif name in plan.lost:  # (failed as lost right after: adopt)
        task.restore(record.attempt, TaskState.RUNNING, Copy.NONE, record.released,
                     "running under the earlier AM attempt")
    else:
        task.restore(record.attempt, TaskState.PENDING, Copy.NONE, record.released, "pending under the earlier "
                     "AM attempt")
