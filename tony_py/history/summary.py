"""job.json: one job's record once it ended (Ray's JobInfo and Kubeflow's conditions, merged,
with TonY's per-task metric names kept verbatim)."""

from __future__ import annotations

from collections import Counter
from typing import Callable

from tony_py.job.view import JobView, TaskView, diagnostics

SUMMARY_VERSION = 1


def task_record(t: TaskView, log_url: Callable[[TaskView], str | None]) -> dict:
    c = t.container
    return {
        "name": t.name, "type": t.type, "index": t.index, "state": t.state.value, "tracked": t.tracked,
        "attempt": t.attempt, "host": c.host if c else None, "node_id": c.node_id if c else None,
        "node_http": c.node_http if c else None, "container_id": c.id if c else None,
        "exit_code": t.exit_code, "signal": t.signal, "started_at": t.started_at, "finished_at": t.finished_at,
        "log_url": log_url(t), "metrics": dict(t.metrics), "gpus": list(t.gpus),
    }


def conditions(events: list[dict]) -> list[dict]:
    """The job's state changes, as Kubeflow's conditions: type, time, message."""
    return [{"type": e["state"], "time": e["ts"], "message": e.get("message", "")}
            for e in events if e.get("kind") == "STATE" and e.get("state")]


def job_summary(view: JobView, *, app_id: str, user: str, submitted_at: float | None, finished_at: float,
                am_attempt: int, tracking_url: str | None, am_log_url: str | None,
                log_url: Callable[[TaskView], str | None], state_events: list[dict]) -> dict:
    cause = view.root_cause() if view.final_status != "SUCCEEDED" else None
    counts: dict[str, Counter] = {}
    for t in view.tasks:
        counts.setdefault(t.type, Counter())[t.state.value] += 1
    spec = view.spec
    return {
        "version": SUMMARY_VERSION,
        "app_id": app_id,
        "name": spec.name,
        "user": user,
        "queue": spec.queue,
        "tags": list(spec.tags),
        "framework": spec.framework,
        "submitted_at": submitted_at,
        "started_at": view.started_at,
        "finished_at": finished_at,
        "final_status": view.final_status or "FAILED",
        "message": view.message,
        "root_cause": cause.to_dict() if cause else None,
        "diagnostics": diagnostics(view),
        "restarts_used": view.restarts_used,
        "infra_restarts_used": view.infra_restarts_used,
        "preemptions": view.preemptions,
        "am_attempts": am_attempt,
        "tracking_url": tracking_url,
        "tensorboard_url": view.tensorboard_url,
        "am_log_url": am_log_url,
        "counts": {name: dict(v) for name, v in counts.items()},
        "conditions": conditions(state_events),
        "tasks": [task_record(t, log_url) for t in view.tasks],
    }
