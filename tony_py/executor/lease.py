"""The executor's lease on its task: how a copy of a task knows it may still be the only one.

Every valid answer from the AM renews the lease, counted from when the answered request was
*sent* (the AM heard from this executor no earlier than that), on this node's monotonic clock;
the lease ends `period_s` later (tony.task.executor.lease-sec). The AM, for its part, starts no
replacement for a task before `period_s` plus a margin has passed since it last heard from the
task's executor (tony_py/am/core/fencing.py). So an executor that kills its task when its lease runs
out (heartbeats.py) has done so before any replacement can start, whatever cut it off: no two
copies of a task run at once, and no clock needs to agree with another machine's.

While a task runs, the lease's end is also in a file (TONY_LEASE_FILE), for a task that checks
it before it writes what a copy of itself must never overwrite (tony_py.task.holds_lease): a
node frozen and thawed after its lease ran out resumes the task and the executor at the same
instant, and the check covers the moment before the executor kills the task.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path


class Lease:
    def __init__(self, period_s: float):
        self.period_s = period_s
        self.renewed_at = time.monotonic()  # the executor has just heard from the AM (it was started by it)
        self._path: Path | None = None
        self._lock = threading.Lock()

    def renew(self, sent_at: float) -> None:
        """The AM answered a request sent at `sent_at` (monotonic)."""
        with self._lock:
            if sent_at > self.renewed_at:
                self.renewed_at = sent_at
                self._publish()

    def ends_at(self) -> float:
        return self.renewed_at + self.period_s

    def expired(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.ends_at()

    def silent_for(self, now: float | None = None) -> float:
        """Seconds since the last request the AM answered was sent."""
        return (time.monotonic() if now is None else now) - self.renewed_at

    # ---- the file a running task can read --------------------------------------------------------
    def publish(self, path: Path) -> None:
        with self._lock:
            self._path = path
            self._publish()

    def withdraw(self) -> None:
        with self._lock:
            path, self._path = self._path, None
        if path is not None:
            try:
                path.unlink()
            except OSError:
                pass

    def _publish(self) -> None:
        if self._path is None:
            return
        tmp = self._path.with_name(self._path.name + ".tmp")
        try:
            tmp.write_text(repr(self.ends_at()))
            os.replace(tmp, self._path)
        except OSError:  # the task then reads an older end, or none: it holds no lease
            pass
