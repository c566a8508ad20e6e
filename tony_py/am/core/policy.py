"""Success, failure and restart rules: pure functions of the job spec and the task table.

TonY's rules (kept for compatibility):
- the chief is `chief:0`, else `worker:0`; the job fails at once when it fails, when a task of
  a stop-on-failure type (default: ps) fails, when an untracked task fails, or — with
  tony.application.fail-on-worker-failure-enabled — when any tracked task fails;
- a failed non-chief worker otherwise does not stop training; the job succeeds once every
  tracked task has finished, unless all of them failed;
- sidecar tasks (tensorboard) never decide anything.
TonY-py adds, before those rules: a retryable failure of any task restarts the whole gang
while tony.am.retry-count allows (synchronous training cannot go on with a member missing).
Failures that are the cluster's doing (preemption, a lost node, failed disks: YARN's
infrastructure exits) restart from a budget of their own,
tony.application.max-infrastructure-restarts, and leave the user's retries alone.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from tony_py.am.core.tasks import Task
from tony_py.job.yarn_exits import INFRASTRUCTURE_EXITS, MEMORY_EXITS, PREEMPTED_EXITS
from tony_py.job.records import Failure, FailureKind, TaskState
from tony_py.config.spec import DependencyTimeout, JobSpec

# Failures that are the cluster's doing: restarted from their own budget.
INFRASTRUCTURE_KINDS = (FailureKind.INFRASTRUCTURE, FailureKind.PREEMPTED)


class Action(str, enum.Enum):
    CONTINUE = "continue"
    SUCCEED = "succeed"
    FAIL = "fail"
    RESTART = "restart"


@dataclass(frozen=True)
class Decision:
    action: Action
    message: str = ""
    failure: Failure | None = None


CONTINUE = Decision(Action.CONTINUE)


def describe_exit(exit_code: int | None, signal: str | None) -> str:
    if signal:
        return f"killed by {signal}"
    return f"exit code {exit_code}"


def container_failure_kind(exit_status: int) -> FailureKind:
    """How to read the exit status of a container whose executor never reported a result."""
    if exit_status in PREEMPTED_EXITS:
        return FailureKind.PREEMPTED
    if exit_status in INFRASTRUCTURE_EXITS:
        return FailureKind.INFRASTRUCTURE
    if exit_status in MEMORY_EXITS:
        return FailureKind.EXIT_CODE
    return FailureKind.LOST


def is_infrastructure(failure: Failure) -> bool:
    """The cluster's doing: restarted from tony.application.max-infrastructure-restarts. A task
    that went with a lost AM attempt (its container ended while no AM ran, or it never reached
    the next attempt) is too: the AM's loss is never the user's code, and YARN's own word on the
    same fault (the lost node's containers aborted) is the infrastructure's, so which of them
    the next attempt hears first does not change the budget."""
    return failure.kind in INFRASTRUCTURE_KINDS or failure.during_preemption_of is not None or failure.lost_with_am


def is_retryable(spec: JobSpec, failure: Failure) -> bool:
    if failure.kind == FailureKind.SIGNAL:
        return spec.retry_on_signal
    if failure.kind in (*INFRASTRUCTURE_KINDS, FailureKind.LOST, FailureKind.LAUNCH):
        return spec.retry_on_infrastructure
    if failure.kind == FailureKind.EXIT_CODE:
        return failure.exit_code in spec.retryable_exit_codes
    return False  # timeouts: restarting a hung job rarely un-hangs it


def after_failure(spec: JobSpec, tasks: dict[str, Task], task: Task, restarts_used: int,
                  infra_restarts_used: int = 0, queue_note: str = "") -> Decision:
    """queue_note: how often YARN took the job's containers back, said in a final verdict."""
    failure = task.failure
    assert failure is not None
    if task.id.type in spec.sidecar:
        return CONTINUE
    chief = tasks.get(str(spec.chief()))
    chief_done = chief is not None and chief.state == TaskState.SUCCEEDED
    # Once the chief has succeeded the model is done: rerunning the gang would redo it.
    retry = (is_retryable(spec, failure) or (failure.during_preemption_of is not None and spec.retry_on_infrastructure)) \
        and not chief_done
    if retry and is_infrastructure(failure):
        if infra_restarts_used < spec.max_infrastructure_restarts:
            return Decision(
                Action.RESTART,
                f"restarting all tasks (infrastructure restart {infra_restarts_used + 1} of "
                f"{spec.max_infrastructure_restarts}; none of tony.am.retry-count spent) after {failure.headline()}",
                failure,
            )
        # That budget is spent; the user's retries are not for the cluster's doing. TonY's rules
        # decide, and a verdict says how often the cluster took containers back.
        decision = tonys_rules(spec, tasks, task, failure)
        if decision.action == Action.FAIL:
            decision = Decision(Action.FAIL, f"{decision.message}; {queue_note or 'the cluster took containers back'}"
                                             f" (tony.application.max-infrastructure-restarts="
                                             f"{spec.max_infrastructure_restarts} used up)", failure)
        return decision
    if retry and restarts_used < spec.am_retry_count:
        return Decision(
            Action.RESTART,
            f"restarting all tasks (restart {restarts_used + 1} of {spec.am_retry_count}) after "
            f"{failure.headline()}",
            failure,
        )
    return tonys_rules(spec, tasks, task, failure)


def tonys_rules(spec: JobSpec, tasks: dict[str, Task], task: Task, failure: Failure) -> Decision:
    """A failure that is not restarted: whether it ends the job (TonY's rules)."""
    if task.id == spec.chief():
        return Decision(Action.FAIL, f"the chief {failure.headline()}", failure)
    if spec.stages and spec.stage_of(task.id.type) < spec.last_stage and task.tracked:
        return Decision(Action.FAIL, f"prepare-stage task {failure.headline()}; the training stage was not "
                                     "started", failure)
    if task.id.type in spec.stop_on_failure:
        return Decision(Action.FAIL, f"stop-on-failure task {failure.headline()}", failure)
    if not task.tracked:
        return Decision(Action.FAIL, f"untracked task {failure.headline()}", failure)
    if spec.fail_on_worker_failure:
        return Decision(
            Action.FAIL,
            f"{failure.headline()} (tony.application.fail-on-worker-failure-enabled=true)",
            failure,
        )
    return completion(spec, tasks)


def stage_done(spec: JobSpec, tasks: dict[str, Task], stage: int) -> bool:
    """A stage before the last is done when every tracked task of it succeeded."""
    if stage >= spec.last_stage:
        return False
    members = [t for t in tasks.values() if spec.stage_of(t.id.type) == stage and t.tracked]
    return all(t.state == TaskState.SUCCEEDED for t in members)


def dependency_timeouts(spec: JobSpec, tasks: dict[str, Task], now: float) -> list[tuple[DependencyTimeout, list[Task]]]:
    """tony.application.dependency.<type>.timeout.after.<group>: once every task of the group
    finished, tracked tasks of <type> still running after the timeout."""
    out = []
    for dependency in spec.dependency_timeouts:
        members = [t for t in tasks.values() if t.id.type in spec.groups.get(dependency.group, ())]
        if not members or not all(t.state.finished for t in members):
            continue
        finished_at = max(t.finished_at or now for t in members)
        running = [t for t in tasks.values() if t.id.type == dependency.type and t.tracked and not t.state.finished]
        if running and now - finished_at > dependency.seconds:
            out.append((dependency, running))
    return out


def describe_dependency_timeout(spec: JobSpec, dependency: DependencyTimeout) -> str:
    members = ",".join(spec.groups.get(dependency.group, ()))
    return (f"{dependency.type} tasks still running {dependency.seconds} s after every task of group "
            f"{dependency.group} ({members}) finished (tony.application.dependency.{dependency.type}.timeout.after."
            f"{dependency.group}={dependency.seconds})")


def completion(spec: JobSpec, tasks: dict[str, Task]) -> Decision:
    """Once every tracked task has finished: success unless all of them failed (tasks a smaller
    gang went on without, PARKED, are not counted either way)."""
    parked = [t.name for t in tasks.values() if t.tracked and t.state == TaskState.PARKED]
    tracked = [t for t in tasks.values() if t.tracked and t.state != TaskState.PARKED]
    if not tracked or not all(t.state.finished for t in tracked):
        return CONTINUE
    failed = [t for t in tracked if t.failure is not None]
    if failed and len(failed) == len(tracked):
        first = min((t.failure for t in failed), key=lambda f: f.time)
        return Decision(Action.FAIL, f"every tracked task failed; first: {first.headline()}", first)
    smaller = f" (the gang finished without {', '.join(parked)}: tony.<type>.min-instances)" if parked else ""
    if failed:
        names = ", ".join(t.name for t in failed)
        return Decision(Action.SUCCEED, f"all tracked tasks finished; some worker tasks failed: {names}{smaller}")
    return Decision(Action.SUCCEED, f"all tracked tasks succeeded{smaller}")


# ---- restarts and nodes -------------------------------------------------------------------------
# Failures after which the container itself is suspect (hung, cut off, gone): never kept.
_CONTAINER_SUSPECT = (FailureKind.LOST, *INFRASTRUCTURE_KINDS, FailureKind.LAUNCH, FailureKind.TIMEOUT)


def keep_on_restart(spec: JobSpec, task: Task, now: float) -> bool:
    """Whether a gang restart reuses the task's container in place (fresh ports, no YARN round
    trip): only where the executor is alive and heard from lately (two heartbeat intervals: a
    quieter one is likely hit by the same fault), holds its container, and did not itself fail in
    a way that makes the container suspect."""
    recent = task.polling or (task.last_contact is not None
                              and now - task.last_contact <= 2 * spec.heartbeat_interval_ms / 1000)
    return (
        task.container is not None
        and task.preempt_deadline is None  # YARN takes its container: a replacement goes elsewhere
        and task.container_started
        and not task.released
        and bool(recent)
        and not (task.failure and task.failure.kind in _CONTAINER_SUSPECT)
    )


def counts_against_node(failure_kind: FailureKind) -> bool:
    """A user's own exit code or a preemption says nothing about the node; everything else might."""
    return failure_kind not in (FailureKind.EXIT_CODE, FailureKind.PREEMPTED)


def blacklist_node(spec: JobSpec, failures_on_node: int) -> bool:
    limit = spec.max_failures_per_node
    return bool(limit) and failures_on_node >= limit


# ---- timeouts: each returns why (a message) or None ---------------------------------------------
def am_stall(spec: JobSpec, last_tick: float | None, now: float) -> float:
    """How long the AM itself stood still (a GC pause, a frozen VM) beyond its usual tick, or 0:
    silence from executors during that time is the AM's, not theirs, and must not count."""
    if last_tick is None:
        return 0.0
    gap = now - last_tick
    return gap if gap > max(2.0, spec.heartbeat_interval_ms / 1000) else 0.0


def app_timeout(spec: JobSpec, started_at: float, now: float) -> str | None:
    if spec.timeout_ms > 0 and now - started_at > spec.timeout_ms / 1000:
        return f"the application timed out after {spec.timeout_ms / 1000:.0f} s (tony.application.timeout)"
    return None


def allocation_timeout(spec: JobSpec, pending: list[Task], requested_at: float, now: float) -> str | None:
    limit = spec.allocation_timeout_ms
    if limit < 0 or not pending or now - requested_at <= limit / 1000:
        return None
    wanted = []
    for task_type in spec.types:
        missing = sum(1 for t in pending if t.id.type == task_type.name)
        if missing:
            wanted.append(f"{missing} of {task_type.instances} {task_type.name} ({task_type.resources.describe()} each)")
    return (f"{spec.distributed_mode} allocation timed out after {limit / 1000:.0f} s "
            f"(tony.container.allocation.timeout): YARN did not grant {', '.join(wanted)}; the "
            "cluster (or the queue) has no room for them")


def task_timeout(spec: JobSpec, task: Task, now: float) -> tuple[FailureKind, str] | None:
    """Registration, heartbeat and progress timeouts of one task of the current attempt."""
    expiry = spec.heartbeat_interval_ms * spec.max_missed_heartbeats / 1000
    if (task.state in (TaskState.ALLOCATED, TaskState.LAUNCHED) and task.launched_at is not None
            and spec.registration_timeout_ms >= 0 and now - task.launched_at > spec.registration_timeout_ms / 1000):
        return (FailureKind.LAUNCH, f"its executor did not register within {spec.registration_timeout_ms / 1000:.0f} s "
                                    "(tony.container.registration.timeout)")
    if (task.state in (TaskState.REGISTERED, TaskState.RUNNING) and task.last_heartbeat is not None and not task.polling
            and now - task.last_heartbeat > expiry):
        return (FailureKind.LOST, f"its executor sent no heartbeat for {now - task.last_heartbeat:.1f} s "
                                  f"(tony.task.heartbeat-interval-ms x tony.task.max-missed-heartbeats = {expiry:.1f} s)")
    if task.state == TaskState.RUNNING and spec.progress_timeout_ms > 0:
        last = next((t for t in (task.last_progress, task.started_at) if t is not None), now)
        if now - last > spec.progress_timeout_ms / 1000:
            return (FailureKind.TIMEOUT, f"made no progress for {now - last:.1f} s (tony.task.progress-timeout-ms="
                                         f"{spec.progress_timeout_ms}); the process was killed")
    return None


def after_chief(spec: JobSpec, tasks: dict[str, Task], chief_done_at: float | None,
                now: float) -> tuple[list[Task], Decision] | None:
    """Tracked tasks still running long after the chief succeeded: stop them, the job succeeded."""
    limit = spec.after_chief_timeout_ms
    if chief_done_at is None or limit < 0 or now - chief_done_at <= limit / 1000:
        return None
    lingering = [t for t in tasks.values() if t.tracked and not t.state.finished]
    if not lingering:
        return None
    names = ", ".join(t.name for t in lingering)
    return lingering, Decision(Action.SUCCEED, f"the chief succeeded; stopped {names}, still running "
                                               f"{limit / 1000:.0f} s after it (tony.application.after-chief-timeout-ms)")



# Hadoop's words for a delegation token that is dead (AbstractDelegationTokenSecretManager,
# InvalidToken): past its max lifetime, or no longer renewed.
_DEAD_TOKEN = re.compile(r"(InvalidToken|DELEGATION_TOKEN|[Tt]oken ).{0,300}?(has expired|is expired|can't be found in cache)",
                         re.S)
TOKENS_EXPIRED_HINT = ("; the job's delegation tokens have expired (without a keytab a job lives on the tokens it was "
                       "submitted with: resubmit with --principal and --keytab to have the AM renew them)")


def tokens_expired(text: str) -> bool:
    """Whether a failure's words (YARN's for a container, or a task's stderr) say the job's
    delegation tokens are dead."""
    return bool(_DEAD_TOKEN.search(text or ""))
