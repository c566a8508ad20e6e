"""Helpers for training code that runs as a TonY-py task. Standard library only.

Every task container has `tony_py` on its PYTHONPATH, so user code can do:

    from tony_py.task import record, report_progress

    @record                      # a crash writes type, message and traceback to TONY_ERROR_FILE,
    def main():                  # which the AM puts into the job's diagnostics
        for step in range(steps):
            train_step()
            report_progress()    # proves the task is alive (tony.task.progress-timeout-ms)

Without Python: `touch "$TONY_PROGRESS_FILE"` reports progress as well.

A task that writes what a copy of itself must never overwrite (a checkpoint, a step counter in
shared storage) can ask whether it still holds its lease just before it writes:

    if holds_lease():            # False once this copy may have been replaced elsewhere
        save_checkpoint()

Its executor renews the lease while it reaches the AM; after tony.task.executor.lease-sec
without contact it kills the task, and the AM starts no replacement before that. The check
covers the instant in between, e.g. a node frozen and thawed after its lease ran out, whose
processes all resume at once.

When YARN is about to take the container back (preemption for another queue), the task gets
SIGTERM at once; `preemption_deadline()` then says when the kill comes (seconds since the epoch):

    signal.signal(signal.SIGTERM, lambda *_: save_checkpoint_and_exit())
"""

from __future__ import annotations

import functools
import json
import os
import time
import traceback

ERROR_FILE_ENV = "TONY_ERROR_FILE"
PROGRESS_FILE_ENV = "TONY_PROGRESS_FILE"
LEASE_FILE_ENV = "TONY_LEASE_FILE"
PREEMPTION_FILE_ENV = "TONY_PREEMPTION_DEADLINE_FILE"


def write_error(exc: BaseException) -> None:
    """Record an exception in the task's error file; the first one recorded wins."""
    path = os.environ.get(ERROR_FILE_ENV)
    if not path or os.path.exists(path):
        return
    data = {
        "type": type(exc).__name__,
        "message": str(exc),
        "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        "time": time.time(),
        "task": f"{os.environ.get('JOB_NAME', '?')}:{os.environ.get('TASK_INDEX', '?')}",
    }
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(data, f)
    os.replace(tmp, path)


def record(fn):
    """Decorator for a task's entry point: exceptions (and non-zero sys.exit) are recorded."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SystemExit as exc:
            if exc.code not in (None, 0):
                write_error(exc)
            raise
        except BaseException as exc:
            write_error(exc)
            raise

    return wrapper


def report_progress() -> None:
    """Tell TonY-py the task is making progress (updates TONY_PROGRESS_FILE's mtime)."""
    path = os.environ.get(PROGRESS_FILE_ENV)
    if not path:
        return
    with open(path, "a"):
        os.utime(path, None)


def holds_lease() -> bool:
    """Whether this copy of the task still holds its lease: its executor reached the AM within
    the lease period (the file holds the lease's end on this node's monotonic clock). True
    outside TonY-py; False when the lease file is gone or unreadable."""
    path = os.environ.get(LEASE_FILE_ENV)
    if not path:
        return True
    try:
        with open(path) as f:
            return time.monotonic() < float(f.read(64))
    except (OSError, ValueError):
        return False


def preemption_deadline() -> float | None:
    """When YARN kills this task's container (seconds since the epoch), once it announced a
    preemption and the task got SIGTERM for it; None otherwise (also outside TonY-py)."""
    path = os.environ.get(PREEMPTION_FILE_ENV)
    if not path:
        return None
    try:
        with open(path) as f:
            return float(f.read(64))
    except (OSError, ValueError):
        return None
