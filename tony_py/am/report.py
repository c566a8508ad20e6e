"""What the AM tells people about the job: status.json, YARN's diagnostics, the root cause.

Read-only views of the coordinator, taken under its lock by the caller.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from tony_py.am.tasks import Failure, Task

if TYPE_CHECKING:
    from tony_py.am.coordinator import Coordinator

# Fields of status.json that anyone who can reach the AM may read (no hosts, logs or errors).
PUBLIC_JOB_FIELDS = ("app_id", "name", "state", "final_status", "attempt", "restarts_used", "framework",
                     "am_attempt")
PUBLIC_TASK_FIELDS = ("name", "type", "index", "state", "tracked", "attempt")
EVENTS_SHOWN = 100  # the status page's timeline; the history file has every event


def root_cause(failures: list[Failure]) -> Failure | None:
    """The earliest failure of the last attempt that failed: in a gang, the first task to die
    usually takes the others down with it, so later failures are consequences."""
    if not failures:
        return None
    last = max(f.attempt for f in failures)
    return min((f for f in failures if f.attempt == last), key=lambda f: f.time)


def diagnostics(c: "Coordinator") -> str:
    """What YARN records as the application's diagnostics (and the client prints)."""
    if c.decision is None:
        return ""
    lines = [f"TonY-py job {c.final_status}: {c.decision.message}"]
    cause = root_cause(c.failures) if c.final_status != "SUCCEEDED" else None
    if cause is not None:
        lines.append(f"Root cause: {cause.headline()}")
        if cause.error and cause.error.get("traceback"):
            lines.append("--- traceback (from the task's error file) ---")
            lines.append(cause.error["traceback"].rstrip()[-3000:])
        if cause.stderr_tail:
            lines.append(f"--- last lines of {cause.task} stderr ---")
            lines.append(cause.stderr_tail.rstrip()[-4000:])
    others = [f for f in c.failures if f is not cause]
    if others:
        lines.append(("Other failures (in order): " if cause else "Failures the job tolerated: ")
                     + "; ".join(f.headline() for f in others[:10]))
    lines.append("Tasks: " + ", ".join(f"{t.name} {t.state.value}" for t in c.tasks.values()))
    return "\n".join(lines)


def task_row(t: Task, log_url: Callable[[Task], str | None]) -> dict:
    c = t.last_container
    return {
        "name": t.name,
        "type": t.id.type,
        "index": t.id.index,
        "state": t.state.value,
        "tracked": t.tracked,
        "attempt": t.attempt,
        "host": c.host if c else None,
        "node_id": c.node_id if c else None,
        "container_id": c.id if c else None,
        "resource": c.resource if c else None,
        "address": t.address,
        "exit_code": t.exit_code,
        "signal": t.signal,
        "log_url": log_url(t),
        "metrics": t.metrics,
        "gpus": list(t.gpus),
        "started_at": t.started_at,
        "finished_at": t.finished_at,
    }


def status(c: "Coordinator", log_url: Callable[[Task], str | None]) -> dict:
    cause = root_cause(c.failures)
    return {
        "state": c.state.value,
        "final_status": c.final_status,
        "attempt": c.attempt,
        "restarts_used": c.restarts_used,
        "restarts_allowed": c.spec.am_retry_count,
        "framework": c.spec.framework,
        "diagnostics": diagnostics(c) if c.decision else None,
        "root_cause": cause.to_dict() if cause else None,
        "failures": [f.to_dict() for f in c.failures],
        "timeline": dict(c.timeline),
        "messages": c.events.lines(20),
        "stage": c.stage,
        "tensorboard_url": c.tensorboard_url,
        "queue": c.spec.queue,
        "started_at": c.started_at,
        "events": list(c.events.recent)[-EVENTS_SHOWN:],
        "tasks": [task_row(t, log_url) for t in c.tasks.values()],
    }


def public_view(full: dict) -> dict:
    """What anyone who can reach the AM may see: states, no hosts, logs or error text."""
    view = {k: full.get(k) for k in PUBLIC_JOB_FIELDS}
    view["tasks"] = [{k: t.get(k) for k in PUBLIC_TASK_FIELDS} for t in full.get("tasks", [])]
    view["detail"] = "states only: open this page through YARN's proxy (the tracking URL) for the rest"
    return view
