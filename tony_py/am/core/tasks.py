"""What the AM knows about each task: the live task table (one `Task` per task of the job), and
the task's state machine, of which `Task` is the only writer.

A task's states (TaskState, tony_py/job/records.py: history and the client read them too) within
one copy of the task (one container, one executor):

    PENDING ─granted─▶ ALLOCATED ─NM started─▶ LAUNCHED ─registered─▶ REGISTERED ─started─▶ RUNNING
       │                   └──────registered (before the NM's word)──────▲                 │
       ├─▶ PARKED (a smaller gang went on without it)                                      │
       └─▶ STOPPED (the job ended first)  with a container ─▶ SUCCEEDED | FAILED | PREEMPTED | STOPPED

A task with a container may also skip forward (the AM's view can lag behind its executor: see
TRANSITIONS), never back. `Task.enter(state, why)` moves along TRANSITIONS and raises
IllegalTransition on anything else;
the five end states are final for that copy. Only two things start a task over, both on purpose
and both here: `start_over` (a gang restart's new attempt, or a replacement copy within one) and
`restore` (a later AM attempt taking the task over from the snapshot, on an untouched task).

The copy itself has a sub-state, `Copy`, which only moves forward (`Task.reached`): granted, its
container started, kept by a gang restart, its executor registered, served its spec (from then on
it may run the task's process: fencing.py), its process's end known. And whether the AM is ending
the copy, `Ending` (`Task.end_copy`; the first word stands): its executor released (told to exit,
or its container stopped because it is lost or hung), or stopped with the job (its end reads
STOPPED). A task's `attempt` is the gang attempt it belongs to (0, then 1 after the first gang
restart, …); messages from executors about an older attempt are answered as stale.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar

from tony_py.config.spec import TaskId
from tony_py.job.records import Container, Failure, TaskState

S = TaskState
_ENDS = frozenset({S.SUCCEEDED, S.FAILED, S.PREEMPTED, S.STOPPED})
# A task with a container moves forward only, but may skip states: what the AM knows can lag
# behind its executor (the NodeManager's "started" arrives after the registration; a later AM
# attempt adopts a task from a snapshot written before its executor registered, or started, or
# finished; an executor reports an attempt this AM attempt never ordered and the gang catches
# up). REGISTERED and RUNNING again: a call repeated after its answer was lost.
TRANSITIONS: dict[TaskState, frozenset[TaskState]] = {
    S.PENDING: frozenset({S.ALLOCATED, S.PARKED, S.STOPPED}),
    S.ALLOCATED: frozenset({S.LAUNCHED, S.REGISTERED, S.RUNNING}) | _ENDS,
    S.LAUNCHED: frozenset({S.REGISTERED, S.RUNNING}) | _ENDS,
    S.REGISTERED: frozenset({S.REGISTERED, S.RUNNING}) | _ENDS,
    S.RUNNING: frozenset({S.RUNNING}) | _ENDS,
    S.SUCCEEDED: frozenset(), S.FAILED: frozenset(), S.PREEMPTED: frozenset(), S.STOPPED: frozenset(),
    S.PARKED: frozenset(),
}


class IllegalTransition(RuntimeError):
    pass


class Copy(enum.IntEnum):
    """How far the task's current copy has come, as the AM knows it (it only moves forward)."""

    NONE = 0  # no container is the task's
    GRANTED = 1  # YARN granted a container; its start is not confirmed
    STARTED = 2  # its NodeManager started it
    KEPT = 3  # kept by a gang restart: its executor is not back for the new attempt yet
    REGISTERED = 4  # its executor registered for the current attempt
    SERVED = 5  # its executor was given the spec: it may run the task's process
    ENDED = 6  # the process's end is known (its executor reported it, or its NodeManager saw it)


class Ending(enum.Enum):
    NONE = "none"
    RELEASED = "released"  # its executor was told to exit, or its container stopped (lost, hung)
    STOPPING = "stopping"  # the AM asked its container to stop: its end reads STOPPED


@dataclass(eq=False)
class Task:
    # Bumped whenever a task becomes PENDING again: JobCore.next_to_grant then searches from the first.
    pending_again: ClassVar[int] = 0

    id: TaskId
    tracked: bool
    attempt: int = 0
    container: Container | None = None
    last_container: Container | None = None  # kept after the container ends, for logs
    polling: int = 0  # long-polls of its executor now waiting in the AM (alive, not heartbeating)
    address: str | None = None  # host:port the executor reserved for this attempt
    tb_port: int | None = None
    pid: int | None = None
    exit_code: int | None = None
    signal: str | None = None
    failure: Failure | None = None
    launched_at: float | None = None  # container assigned and its start requested
    control_url: str | None = None  # the executor's control endpoint (AM fail-over)
    started_at: float | None = None
    finished_at: float | None = None
    last_heartbeat: float | None = None  # for heartbeat expiry (moved on over the AM's own stalls)
    last_contact: float | None = None  # when the AM last heard from this copy, as it happened (fencing.py)
    last_progress: float | None = None
    metrics: dict = field(default_factory=dict)
    gpus: list[str] = field(default_factory=list)  # the devices its container holds (am/core/gpus.py)
    preempt_deadline: float | None = None  # YARN kills its container then (epoch s): the task was warned
    preempted_at: float | None = None  # when the AM learned it
    adopted_at: float | None = None  # re-adopted from an earlier AM attempt, not heard from by this one yet
    # The state machine's own (read them through the properties below; written only here).
    _state: TaskState = field(default=TaskState.PENDING, repr=False)
    why: str = ""  # what moved the task into its state
    _copy: Copy = field(default=Copy.NONE, repr=False)
    _ending: Ending = field(default=Ending.NONE, repr=False)

    @property
    def name(self) -> str:
        return str(self.id)

    # ---- the task's state -----------------------------------------------------------------
    @property
    def state(self) -> TaskState:
        return self._state

    def enter(self, state: TaskState, why: str) -> None:
        if state not in TRANSITIONS[self._state]:
            raise IllegalTransition(f"{self.name} (attempt {self.attempt}): {self._state.value} ({self.why}) -> "
                                    f"{state.value} ({why})")
        self._state, self.why = state, why

    def start_over(self, attempt: int, keep_container: bool, why: str) -> None:
        """A new copy of the task: the gang's next attempt, or a replacement within this one.
        Forgets the previous copy's run; keeps the container for an in-place restart."""
        self.attempt = attempt
        self.address = None
        self.tb_port = None
        self.pid = None
        self.exit_code = None
        self.signal = None
        self.failure = None
        self.started_at = None
        self.finished_at = None
        self.last_progress = None
        self._ending = Ending.NONE
        self.preempt_deadline = self.preempted_at = None
        self.adopted_at = None
        self.why = why
        if keep_container and self.container is not None:
            self._state, self._copy = TaskState.LAUNCHED, Copy.KEPT
        else:
            self.container = None
            self.gpus = []
            self.control_url = None
            self.launched_at = None
            self._state, self._copy = TaskState.PENDING, Copy.NONE
            Task.pending_again += 1

    def restore(self, attempt: int, state: TaskState, copy: Copy, released: bool, why: str) -> None:
        """Take the task over from an earlier AM attempt's snapshot (am/core/adoption.py)."""
        if self._state != TaskState.PENDING or self._copy != Copy.NONE or self.attempt:
            raise IllegalTransition(f"{self.name}: restored from a snapshot after it had moved ({self._state.value})")
        self.attempt, self._state, self._copy, self.why = attempt, state, copy, why
        self._ending = Ending.RELEASED if released else Ending.NONE
        if state == TaskState.PENDING:
            Task.pending_again += 1

    # ---- its copy -------------------------------------------------------------------------
    @property
    def copy(self) -> Copy:
        return self._copy

    def reached(self, copy: Copy) -> None:
        """The copy came this far (a later word that it came less far changes nothing: the NM's
        "started" can arrive after the executor registered)."""
        self._copy = max(self._copy, copy)

    @property
    def ending(self) -> Ending:
        return self._ending

    def end_copy(self, how: Ending) -> None:
        if self._ending == Ending.NONE:
            self._ending = how

    @property
    def container_started(self) -> bool:
        return self.container is not None and self._copy >= Copy.STARTED

    @property
    def kept(self) -> bool:
        return self._copy == Copy.KEPT

    @property
    def may_run(self) -> bool:
        """Whether this copy may be running the task's process (fencing.py)."""
        return self._copy == Copy.SERVED

    @property
    def released(self) -> bool:
        return self._ending == Ending.RELEASED

    @property
    def stopping(self) -> bool:
        return self._ending == Ending.STOPPING
