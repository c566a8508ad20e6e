"""The clock's part of the job: the timeouts that end hangs (rules in policy.py), heartbeats,
and the AM's own stalls.

Checked every tick (the AM's loop, ~5 times a second) while the job is undecided. Runs under the
job's lock (the coordinator's entry points take it).
"""

from __future__ import annotations

from tony_py.am.core import events as ev
from tony_py.am.core import policy
from tony_py.am.core.policy import Action, Decision
from tony_py.am.core.recovery import Recovery
from tony_py.am.core.state import JobCore
from tony_py.am.core.tasks import Ending
from tony_py.job.records import FailureKind


class Watchdog:
    def __init__(self, job: JobCore, recovery: Recovery):
        self.job = job
        self.recovery = recovery
        self.resized = False  # the gang shrank: its spec may be served now (the coordinator does)

    def note_stall(self, now: float) -> None:
        """Silence from executors while the AM itself stood still (a GC pause, a frozen VM) is
        the AM's, not theirs: it does not count against their heartbeats."""
        job = self.job
        stall = policy.am_stall(job.spec, job.last_tick, now)
        job.last_tick = now
        if stall:
            for task in job.tasks.values():
                if task.last_heartbeat is not None:
                    task.last_heartbeat += stall
            job.events.record(ev.NOTE, f"the AM itself stood still for {stall:.1f} s; executor silence in "
                                       "that time is not counted")

    def check(self, now: float) -> None:
        """Every timeout of an undecided job; the first that fires decides."""
        job = self.job
        why = policy.app_timeout(job.spec, job.started_at, now)
        if not why:
            why = policy.allocation_timeout(job.spec, job.pending(), self.recovery.book.requested_at, now)
            if why and self.recovery.shrink(why):  # tony.<type>.min-instances: go on without them
                self.resized = True
                why = None
        if why:
            self.recovery.finish(Decision(Action.FAIL, why), status="FAILED")
            return
        self._task_timeouts(now)
        for dependency, running in ([] if job.decision else policy.dependency_timeouts(job.spec, job.tasks, now)):
            if job.decision is not None:
                break
            self._dependency_timed_out(dependency, running)
        stop = None if job.decision else policy.after_chief(job.spec, job.tasks, job.chief_done_at, now)
        if stop:
            lingering, decision = stop
            for task in lingering:
                task.end_copy(Ending.STOPPING)
            self.recovery.finish(decision, status="SUCCEEDED")

    def _task_timeouts(self, now: float) -> None:
        job = self.job
        expiry = job.spec.heartbeat_interval_ms * job.spec.max_missed_heartbeats / 1000
        for task in list(job.tasks.values()):
            if job.decision is not None:
                return
            if task.attempt != job.attempt or task.released:
                continue
            if task.kept and task.last_heartbeat is not None and now - task.last_heartbeat > expiry:
                self._avoid_node_of(task)
                self.recovery.replace(task, f"its executor went silent for {now - task.last_heartbeat:.1f} s before "
                                            "it came back for the restart")
                continue
            timed_out = policy.task_timeout(job.spec, task, now)
            if timed_out:
                kind, message = timed_out
                details = {}
                if kind == FailureKind.LOST:
                    job.events.record(ev.HEARTBEAT_LOST, message, task.name, attempt=task.attempt,
                                      silent_s=round(now - task.last_heartbeat, 3))
                    self._avoid_node_of(task)
                    if task.adopted_at is not None:  # never reached this attempt: it went with the last one
                        message += f"; re-adopted {now - task.adopted_at:.0f} s ago, it never reached this AM attempt"
                        details["lost_with_am"] = True
                self.recovery.fail(task, kind, message, **details)

    def _avoid_node_of(self, task) -> None:
        if task.container is not None:
            self.recovery.avoid_node(task.container.node_id, f"the executor of {task.name} there went silent")

    def _dependency_timed_out(self, dependency, running) -> None:
        job = self.job
        message = policy.describe_dependency_timeout(job.spec, dependency)
        if not dependency.ignored:
            self.recovery.finish(Decision(Action.FAIL, message), status="FAILED")
            return
        for task in job.tasks.values():
            if task.id.type == dependency.type:
                task.tracked = False  # TonY's .ignored: the type no longer decides the job
        job.dirty = True
        job.events.record(ev.NOTE, f"{message}; ignored: {dependency.type} is untracked from now on")
        self.recovery.apply(policy.completion(job.spec, job.tasks))
