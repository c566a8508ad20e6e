"""What the AM knows about each task, and the task state machine.

    PENDING ──allocated──▶ ALLOCATED ──NM started──▶ LAUNCHED ──executor registered──▶ REGISTERED
        ▲                                                                                  │
        │                                                         user process started     ▼
        └────────── gang restart, container gone ◀──────────────────────────────────── RUNNING
                    (in place: back to LAUNCHED)                                          │
                                                  exit 0 ─▶ SUCCEEDED   exit ≠ 0, signal, │
                                                  lost executor/node ─▶ FAILED  ◀─────────┘
                                                  stopped by the AM   ─▶ STOPPED

A task's `attempt` is the gang attempt it belongs to (0, then 1 after the first gang
restart, …); messages from executors about an older attempt are ignored.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from tony_py.config.model import Checked
from tony_py.config.spec import TaskId


class TaskState(str, enum.Enum):
    PENDING = "PENDING"
    ALLOCATED = "ALLOCATED"
    LAUNCHED = "LAUNCHED"
    REGISTERED = "REGISTERED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"

    @property
    def finished(self) -> bool:
        return self in (TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED)


class FailureKind(str, enum.Enum):
    """Why a task failed; the restart policy decides which kinds are retryable."""

    EXIT_CODE = "exit_code"  # the user process exited non-zero
    SIGNAL = "signal"  # the user process was killed by a signal
    INFRASTRUCTURE = "infrastructure"  # YARN: preempted, aborted, disks failed, node lost
    LOST = "lost"  # the executor vanished (no heartbeat, or its container ended)
    LAUNCH = "launch"  # the container could not be started
    TIMEOUT = "timeout"  # an execution / progress timeout fired


@dataclass
class Failure(Checked):
    """One failure of one task in one attempt; the earliest fatal one is the root cause."""

    task: str
    attempt: int
    kind: FailureKind
    message: str
    time: float = field(default_factory=time.time)
    host: str | None = None
    container_id: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    stderr_tail: str = ""
    error: dict[str, Any] | None = None  # what the task wrote to its TONY_ERROR_FILE

    def headline(self) -> str:
        where = f" on {self.host}" if self.host else ""
        return f"{self.task} (attempt {self.attempt}{where}): {self.message}"



@dataclass
class Container(Checked):
    id: str
    node_id: str
    host: str
    node_http: str
    resource: dict[str, int]

    @classmethod
    def from_event(cls, data: dict) -> "Container":
        return cls(
            id=data["id"],
            node_id=data["node_id"],
            host=data["host"],
            node_http=data.get("node_http") or "",
            resource=data.get("resource") or {},
        )


@dataclass
class Task:
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
    last_heartbeat: float | None = None
    last_progress: float | None = None
    metrics: dict = field(default_factory=dict)
    gpus: list[str] = field(default_factory=list)  # the devices its container holds (am/gpus.py)

    @property
    def name(self) -> str:
        return str(self.id)

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
