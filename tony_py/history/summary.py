"""job.json: one job's record once it ended (Ray's JobInfo and Kubeflow's conditions, merged,
with TonY's per-task metric names kept verbatim)."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Callable

from tony_py.am import report

if TYPE_CHECKING:
    from tony_py.am.coordinator import Coordinator
    from tony_py.am.tasks import Task

SUMMARY_VERSION = 1


def task_record(t: "Task", log_url: Callable[["Task"], str | None]) -> dict:
    c = t.last_container
    return {
        "name": t.name, "type": t.id.type, "index": t.id.index, "state": t.state.value, "tracked": t.tracked,
        "attempt": t.attempt, "host": c.host if c else None, "node_id": c.node_id if c else None,
        "node_http": c.node_http if c else None, "container_id": c.id if c else None,
        "exit_code": t.exit_code, "signal": t.signal, "started_at": t.started_at, "finished_at": t.finished_at,
        "log_url": log_url(t), "metrics": dict(t.metrics), "gpus": list(t.gpus),
    }


def conditions(events: list[dict]) -> list[dict]:
    """The job's state changes, as Kubeflow's conditions: type, time, message."""
    return [{"type": e["state"], "time": e["ts"], "message": e.get("message", "")}
            for e in events if e.get("kind") == "STATE" and e.get("state")]


def job_summary(c: "Coordinator", *, app_id: str, user: str, submitted_at: float | None, finished_at: float,
                am_attempt: int, tracking_url: str | None, am_log_url: str | None,
                log_url: Callable[["Task"], str | None], state_events: list[dict]) -> dict:
    with c.lock:
        cause = report.root_cause(c.failures) if c.final_status != "SUCCEEDED" else None
        counts: dict[str, Counter] = {}
        for t in c.tasks.values():
            counts.setdefault(t.id.type, Counter())[t.state.value] += 1
        spec = c.spec
        return {
            "version": SUMMARY_VERSION,
            "app_id": app_id,
            "name": spec.name,
            "user": user,
            "queue": spec.queue,
            "tags": list(spec.tags),
            "framework": spec.framework,
            "submitted_at": submitted_at,
            "started_at": c.started_at,
            "finished_at": finished_at,
            "final_status": c.final_status or "FAILED",
            "message": c.decision.message if c.decision else "",
            "root_cause": cause.to_dict() if cause else None,
            "diagnostics": report.diagnostics(c),
            "restarts_used": c.restarts_used,
            "am_attempts": am_attempt,
            "tracking_url": tracking_url,
            "tensorboard_url": c.tensorboard_url,
            "am_log_url": am_log_url,
            "counts": {name: dict(v) for name, v in counts.items()},
            "conditions": conditions(state_events),
            "tasks": [task_record(t, log_url) for t in c.tasks.values()],
        }
