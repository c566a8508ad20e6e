"""The job's event timeline: what happened, when, to which task.

The coordinator records an event for every step of a job's life (under its lock, so the order
is the order things happened). The last MAX_KEPT stay in memory for the status page; listeners
(the history writer) get every one, and must only queue it: they run under the coordinator's
lock. A week-long job therefore costs bounded memory here; the history file is the record.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Callable

MAX_KEPT = 500

# Kinds, in the order a job usually meets them.
SUBMITTED = "SUBMITTED"
AM_STARTED = "AM_STARTED"
STATE = "STATE"  # the job's state changed (ALLOCATING, RUNNING, RESTARTING, FINISHING, DONE)
REQUESTED = "REQUESTED"
ALLOCATED = "ALLOCATED"
LAUNCHED = "LAUNCHED"
REGISTERED = "REGISTERED"
SPEC_SERVED = "SPEC_SERVED"
TASK_STARTED = "TASK_STARTED"
TASK_FINISHED = "TASK_FINISHED"
HEARTBEAT_LOST = "HEARTBEAT_LOST"
RESIZE = "RESIZE"  # the gang goes on smaller (tony.<type>.min-instances) or asks to grow back
PREEMPTION = "PREEMPTION"  # YARN will take a container back: its task was told (SIGTERM) and given the deadline
RESTART_DECIDED = "RESTART_DECIDED"
AM_FAILOVER = "AM_FAILOVER"
RM_RECONNECTED = "RM_RECONNECTED"  # the RM answered again after an outage this attempt rode through
NODE_BLACKLISTED = "NODE_BLACKLISTED"
TB_REGISTERED = "TB_REGISTERED"
VERDICT = "VERDICT"
APP_FINISHED = "APP_FINISHED"
NOTE = "NOTE"

Listener = Callable[[dict], None]
# The first event of these kinds (per task, where they name one) is kept however long the job
# runs: where its time went (tony_py/advice) needs the start of a job that `recent` has forgotten.
MILESTONES = frozenset({SUBMITTED, AM_STARTED, REQUESTED, ALLOCATED, LAUNCHED, REGISTERED, SPEC_SERVED,
                        TASK_STARTED, PREEMPTION})


class EventLog:
    def __init__(self, clock: Callable[[], float] = time.time, keep: int = MAX_KEPT):
        self.clock = clock
        self.recent: deque[dict] = deque(maxlen=keep)
        self.listeners: list[Listener] = []
        self.count = 0
        self._firsts: dict[tuple[str, str | None], dict] = {}

    def record(self, kind: str, message: str = "", task: str | None = None, at: float | None = None,
               **fields) -> dict:
        event = {"ts": self.clock() if at is None else at, "kind": kind, "task": task, "message": message}
        event.update({k: v for k, v in fields.items() if v is not None})
        self.recent.append(event)
        self.count += 1
        if kind in MILESTONES:
            self._firsts.setdefault((kind, task), event)
        for listener in self.listeners:
            listener(event)
        return event

    def milestones(self) -> list[dict]:
        """The first event of each milestone kind (per task), then every recent one, in time order."""
        recent = list(self.recent)
        seen = {id(e) for e in recent}
        return sorted([e for e in self._firsts.values() if id(e) not in seen] + recent, key=lambda e: e["ts"])

    def lines(self, last: int = 20) -> list[str]:
        """Human-readable tail, e.g. for the client's and the page's message list."""
        out = []
        for event in list(self.recent)[-last:]:
            when = time.strftime("%H:%M:%S", time.localtime(event["ts"]))
            who = f"{event['task']}: " if event.get("task") else ""
            out.append(f"{when} {who}{event['message'] or event['kind']}")
        return out
