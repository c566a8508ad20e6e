"""The job's state machine, and the state the AM keeps about the job.

Job states (`JobState`; `JobCore.enter` is the only place the state changes, and it refuses any
transition not in TRANSITIONS):

    ALLOCATING ──every task registered (GANG) / a first task's spec served (FCFS)──▶ RUNNING
        │   ▲                                                                      │
        │   └──── the prepare stage succeeded: the training stage is requested ◀───┤
        │                                                                          │
        │            retryable failure, restarts left (policy.after_failure)       │
        ├───────────────────────────────▶ RESTARTING ◀─────────────────────────────┤
        │                   (old attempt torn down; same containers where healthy, │
        │                    new ones only where gone; the new gang registers)     │
        │                                     │ the new gang complete: RUNNING     │
        ▼                                     ▼                                    ▼
    FINISHING (a verdict exists: stop every task still running) ──every container ended──▶ DONE
                                                         final status SUCCEEDED | FAILED | KILLED

A gang whose tasks are all registered still waits while a copy of one of its tasks may be
running somewhere it can no longer be told to stop (fencing.py): its lease must run out first.

`JobCore` holds what the coordinator's parts share (tasks, attempt, failures, verdict, …). The parts
(protocol.py, recovery.py, watchdog.py, adoption.py) change it only under `JobCore.lock`, which the
coordinator's entry points take.
"""

from __future__ import annotations

import enum
import threading
from itertools import chain
from typing import Callable

from tony_py.am.core import events as ev
from tony_py.am.core.events import EventLog
from tony_py.am.core.fencing import Fences
from tony_py.am.core.gpus import GpuBook
from tony_py.am.core.policy import Decision
from tony_py.am.core.tasks import IllegalTransition, Task
from tony_py.config.spec import JobSpec, TaskId
from tony_py.job.records import TaskState
from tony_py.job.view import JobView, TaskView, dashboards

EVENTS_SHOWN = 100  # the status page's timeline; the history file has every event


class JobState(str, enum.Enum):
    ALLOCATING = "ALLOCATING"  # containers requested; the gang is not complete yet (first attempt)
    RUNNING = "RUNNING"  # the gang is complete: specs served, user processes run
    RESTARTING = "RESTARTING"  # a gang restart is under way: the new attempt's gang is not complete yet
    FINISHING = "FINISHING"  # a verdict exists; tasks still running are being stopped
    DONE = "DONE"  # every container ended (or the grace period passed); the AM may unregister


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.ALLOCATING: frozenset({JobState.RUNNING, JobState.RESTARTING, JobState.FINISHING}),
    JobState.RUNNING: frozenset({JobState.ALLOCATING, JobState.RESTARTING, JobState.FINISHING}),  # ALLOCATING: next stage
    JobState.RESTARTING: frozenset({JobState.RUNNING, JobState.RESTARTING, JobState.FINISHING}),
    JobState.FINISHING: frozenset({JobState.DONE}),
    JobState.DONE: frozenset(),
}


class JobCore:
    """The job as the AM knows it: the core the coordinator's parts share, without I/O (the
    client's handle on a job is tony_py/client/job.py's Job)."""

    def __init__(self, spec: JobSpec, clock: Callable[[], float], events: EventLog | None):
        self.spec = spec
        self.clock = clock
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.tasks: dict[str, Task] = {str(t): Task(t, tracked=spec.is_tracked(t.type)) for t in spec.tasks()}
        self._of_type: dict[str, list[Task]] = {}  # (tasks are fixed for the AM's life)
        self._grant_cursor: dict[str, int] = {}  # next_to_grant
        self._pending_seen = Task.pending_again
        self._by_container: dict[str, Task] = {}  # task_for_container's hints
        self.events = events or EventLog(clock)
        self.state = JobState.ALLOCATING
        self.attempt = 0  # the gang attempt: 0, then 1 after the first gang restart, ...
        self.restarts_used = 0
        self.infra_restarts_used = 0  # restarts after the cluster's doing (policy.INFRASTRUCTURE_KINDS)
        self.preemptions = 0  # containers YARN took back (warned or not)
        self.warned_containers: set[str] = set()  # each warned once (the message repeats), counted once
        self.failures = []
        self.decision: Decision | None = None
        self.final_status: str | None = None
        self.cluster_view: dict[str, list[str]] | None = None
        self.started_at = clock()
        self.finish_deadline: float | None = None
        self.chief_done_at: float | None = None
        self.node_failures: dict[str, int] = {}
        self.blacklisted: set[str] = set()
        self.avoided: dict[str, float] = {}  # node -> until when no new container goes there (recovery.avoid_node)
        self.timeline: dict[str, float] = {"am_started": self.started_at}
        self.dirty = True  # the snapshot for a later AM attempt is out of date
        self.last_tick: float | None = None
        self.stage = 0  # the stage being run (tony.application.prepare-stage / training-stage)
        self.callbacks: dict[str, dict] = {}  # what task processes reported back (Horovod's driver port)
        self.callbacks_seen = 0  # bumped by every callback: an env plan built before it is stale
        self.tensorboard_url: str | None = None
        self.gpus = GpuBook()
        self.fences = Fences(spec.lease_s)
        # called (under the lock) when something changed that a waiting spec long-poll may be
        # answered by: the HTTP server wakes its waiters on its own loop
        self.watchers: list[Callable[[], None]] = []

    # ---- the one place the job's state changes ---------------------------------------------
    def enter(self, state: JobState, why: str = "") -> None:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"{self.state.value} -> {state.value}")
        self.state = state
        self.dirty = True
        self.events.record(ev.STATE, why or state.value, state=state.value, attempt=self.attempt)
        self.changed()

    def changed(self) -> None:
        """Wake whoever waits for the job: blocking long-polls and the server's watchers."""
        self.cond.notify_all()
        for watcher in self.watchers:
            watcher()

    # ---- lookups ---------------------------------------------------------------------------
    def mark(self, phase: str) -> None:
        self.timeline.setdefault(f"{phase}@{self.attempt}" if self.attempt else phase, self.clock())

    def task_for_container(self, container_id: str) -> Task | None:
        known = self._by_container.get(container_id)  # (checked: a hint, never the truth)
        if known is not None and known.container is not None and known.container.id == container_id:
            return known
        for task in self.tasks.values():
            if task.container is not None and task.container.id == container_id:
                self._by_container[container_id] = task
                return task
        return None

    def give_container(self, task: Task, container) -> None:
        """The task gets this container (YARN granted it)."""
        task.container = task.last_container = container
        self._by_container[container.id] = task

    def next_to_grant(self, type_name: str) -> Task | None:
        """The first PENDING task of this type (by index) with no container, for a container YARN
        granted. The search starts after the task the last grant went to (a job of thousands
        does not rescan the tasks granted already), from the first again once any task became
        PENDING again (Task.pending_again), and wraps, so it misses none."""
        tasks = self._of_type.get(type_name)
        if tasks is None:
            tasks = self._of_type[type_name] = [t for t in self.tasks.values() if t.id.type == type_name]
        if self._pending_seen != Task.pending_again:
            self._pending_seen = Task.pending_again
            self._grant_cursor.clear()
        start = self._grant_cursor.get(type_name, 0)
        for i in chain(range(start, len(tasks)), range(0, min(start, len(tasks)))):
            if tasks[i].state == TaskState.PENDING and tasks[i].container is None:
                self._grant_cursor[type_name] = i + 1
                return tasks[i]
        return None

    def live(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.container is not None]

    def in_play(self, task: Task) -> bool:
        """Tasks of the current stage and of earlier ones (a later stage is not requested yet)."""
        return self.spec.stage_of(task.id.type) <= self.stage

    def dense_id(self, task: Task) -> TaskId:
        """The task as a smaller gang numbers it: its index among the tasks of its type that are
        not parked (a gang without worker:0 calls worker:1 worker 0). Unchanged when none is."""
        if not any(t.state == TaskState.PARKED for t in self.tasks.values()):
            return task.id
        index = sum(1 for t in self.tasks.values()
                    if t.id.type == task.id.type and t.id.index < task.id.index and t.state != TaskState.PARKED)
        return TaskId(task.id.type, index)

    def pending(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.state == TaskState.PENDING and self.in_play(t)]

    @property
    def done(self) -> bool:
        return self.state == JobState.DONE

    # ---- the read-only view reports and history are made from ------------------------------
    def view(self) -> JobView:
        with self.lock:
            return JobView(
                spec=self.spec, state=self.state.value, final_status=self.final_status,
                message=self.decision.message if self.decision else "", attempt=self.attempt,
                restarts_used=self.restarts_used, infra_restarts_used=self.infra_restarts_used,
                preemptions=self.preemptions, started_at=self.started_at, stage=self.stage,
                tensorboard_url=self.tensorboard_url, dashboards=dashboards(self.callbacks),
                failures=tuple(self.failures),
                tasks=tuple(_task_view(t) for t in self.tasks.values()), timeline=dict(self.timeline),
                events=tuple(list(self.events.recent)[-EVENTS_SHOWN:]), messages=tuple(self.events.lines(20)))


def _task_view(t: Task) -> TaskView:
    return TaskView(name=t.name, type=t.id.type, index=t.id.index, state=t.state, tracked=t.tracked,
                    attempt=t.attempt, container=t.last_container, address=t.address, exit_code=t.exit_code,
                    signal=t.signal, started_at=t.started_at, finished_at=t.finished_at, metrics=dict(t.metrics),
                    gpus=tuple(t.gpus))
