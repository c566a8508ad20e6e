"""What the AM knows about each task: the live task table (one `Task` per task of the job).

The states a task moves through, why it failed and where it ran are records of their own
(tony_py/job/records.py: read by history and the client too). A task's `attempt` is the gang
attempt it belongs to (0, then 1 after the first gang restart, …); messages from executors
about an older attempt are answered as stale.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from tony_py.config.spec import TaskId
from tony_py.job.records import Container, Failure, TaskState


@dataclass
class Task:
    # Bumped whenever a task becomes PENDING again: JobCore.next_to_grant then searches from the first.
    pending_again: ClassVar[int] = 0

    id: TaskId
    tracked: bool
    state: TaskState = TaskState.PENDING
    attempt: int = 0
    container: Container | None = None
    last_container: Container | None = None  # kept after the container ends, for logs
    container_started: bool = False
    released: bool = False  # its executor was told to exit; the container is ending
    kept: bool = False  # its container was kept by a gang restart; not re-registered yet
    polling: int = 0  # long-polls of its executor now waiting in the AM (alive, not heartbeating)
    stopping: bool = False  # the AM asked its container to stop
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
    served: bool = False  # this copy was given its spec: it may run the task's process
    ended: bool = False  # the process's end is known (its executor reported it, or its NodeManager saw it)
    last_progress: float | None = None
    metrics: dict = field(default_factory=dict)
    gpus: list[str] = field(default_factory=list)  # the devices its container holds (am/core/gpus.py)
    preempt_deadline: float | None = None  # YARN kills its container then (epoch s): the task was warned
    preempted_at: float | None = None  # when the AM learned it
    adopted_at: float | None = None  # re-adopted from an earlier AM attempt, not heard from by this one yet

    @property
    def name(self) -> str:
        return str(self.id)

    @property
    def may_run(self) -> bool:
        """Whether this copy may be running the task's process (fencing.py)."""
        return self.served and not self.ended

    def reset_for_attempt(self, attempt: int, keep_container: bool) -> None:
        """Forget the previous attempt's run; keep the container for an in-place restart."""
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
        self.stopping = False
        self.released = False
        self.served = self.ended = False
        self.preempt_deadline = self.preempted_at = None
        self.adopted_at = None
        self.kept = keep_container and self.container is not None
        if self.kept:
            self.state = TaskState.LAUNCHED
        else:
            self.container = None
            self.gpus = []
            self.container_started = False
            self.control_url = None
            self.launched_at = None
            self.state = TaskState.PENDING
            Task.pending_again += 1
