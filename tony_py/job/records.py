"""A job's records, as the AM keeps them and history and the client read them: the task state
machine's states, why a task failed, and the container it ran in. Values only, no behaviour
beyond describing themselves; the AM's live task table is tony_py/am/core/tasks.py.

Task states (the AM moves a task through them: tony_py/am/core/tasks.py):

    PENDING ──allocated──▶ ALLOCATED ──NM started──▶ LAUNCHED ──executor registered──▶ REGISTERED
        ▲                                                                                  │
        │                                                         user process started     ▼
        └────────── gang restart, container gone ◀──────────────────────────────────── RUNNING
                    (in place: back to LAUNCHED)                                          │
                                                  exit 0 ─▶ SUCCEEDED   exit ≠ 0, signal, │
                                                  lost executor/node ─▶ FAILED  ◀─────────┘
                                                  stopped by the AM   ─▶ STOPPED
                                                  YARN took it back   ─▶ PREEMPTED
    PENDING ──not granted within the allocation timeout, the gang can do without it──▶ PARKED
    PARKED ──next gang restart (the gang grows back)──▶ PENDING
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field
from typing import Any

from tony_py.config.model import Checked


class TaskState(str, enum.Enum):
    PENDING = "PENDING"
    ALLOCATED = "ALLOCATED"
    LAUNCHED = "LAUNCHED"
    REGISTERED = "REGISTERED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    STOPPED = "STOPPED"
    PREEMPTED = "PREEMPTED"  # its queue's share was needed elsewhere: not the task's failure
    PARKED = "PARKED"  # left out of a smaller gang (tony.<type>.min-instances) until the next restart

    @property
    def finished(self) -> bool:
        return self in _FINISHED  # (a set: asked for every task on every container's end)


_FINISHED = frozenset({TaskState.SUCCEEDED, TaskState.FAILED, TaskState.STOPPED, TaskState.PREEMPTED,
                       TaskState.PARKED})


class FailureKind(str, enum.Enum):
    """Why a task failed; the restart policy decides which kinds are retryable."""

    EXIT_CODE = "exit_code"  # the user process exited non-zero
    SIGNAL = "signal"  # the user process was killed by a signal
    INFRASTRUCTURE = "infrastructure"  # YARN: aborted, disks failed, node lost
    PREEMPTED = "preempted"  # YARN took the container back for another queue (warned first, or not)
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
    during_preemption_of: str | None = None  # it ended while this task was being preempted (its consequence)
    lost_with_am: bool = False  # it went with an earlier AM attempt (ended, or silent, since that one was lost)

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
