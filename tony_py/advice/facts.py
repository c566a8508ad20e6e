"""One JobFacts from wherever the job is: its history (job.json, events, tony-final.xml) once it
is over, or the AM's own view while it runs."""

from __future__ import annotations

from tony_py.advice.model import JobFacts, TaskFacts
from tony_py.config.build import build_job_spec
from tony_py.config.layers import TonyConf
from tony_py.errors import UsageError


def spec_of(props: dict[str, str]):
    """The job's spec, rebuilt from its resolved configuration (tony-final.xml)."""
    if not props:
        raise UsageError("the history has no configuration of this job (tony-final.xml): nothing to compare with")
    conf = TonyConf()
    conf.update(props, "tony-final.xml")
    return build_job_spec(conf, python=props.get("tony.executor.python") or "python3")


def from_history(summary: dict, events: list[dict], props: dict[str, str], min_allocation: int,
                 queues: tuple[tuple[str, int], ...] = (), max_allocation: int | None = None) -> JobFacts:
    tasks = tuple(TaskFacts(
        name=t["name"], type=t.get("type") or t["name"].split(":")[0], state=t.get("state") or "",
        tracked=t.get("tracked", True), host=t.get("host"), started_at=t.get("started_at"),
        finished_at=t.get("finished_at"), exit_code=t.get("exit_code"), signal=t.get("signal"),
        metrics=dict(t.get("metrics") or {})) for t in summary.get("tasks") or [])
    return JobFacts(
        app_id=summary["app_id"], spec=spec_of(props), status=summary.get("final_status") or "FAILED", tasks=tasks,
        failures=failures_from_events(events, summary.get("root_cause")), events=tuple(events),
        submitted_at=summary.get("submitted_at"), finished_at=summary.get("finished_at"),
        restarts_used=summary.get("restarts_used") or 0, infra_restarts_used=summary.get("infra_restarts_used") or 0,
        min_allocation_mb=min_allocation, max_allocation_mb=max_allocation, queues=queues)


def failures_from_events(events: list[dict], root_cause: dict | None) -> tuple[dict, ...]:
    """Every failure, as Failure.to_dict() has it, from the TASK_FINISHED events that carry a
    failure kind (job.json keeps only the root cause); the host is the one its container ran on."""
    host_of: dict[str, str] = {}
    out = []
    for e in events:
        if e.get("kind") == "ALLOCATED" and e.get("task"):
            host_of[e["task"]] = e.get("host")
        elif e.get("kind") == "TASK_FINISHED" and e.get("failure_kind"):
            out.append({"task": e.get("task"), "attempt": e.get("attempt"), "kind": e["failure_kind"],
                        "message": e.get("message", ""), "time": e.get("ts"), "host": host_of.get(e.get("task")),
                        "exit_code": e.get("exit_code"), "signal": e.get("signal")})
    if not out and root_cause:
        out.append(dict(root_cause))
    return tuple(out)


def from_view(view, events: list[dict], now: float, min_allocation: int,
              app_id: str = "", max_allocation: int | None = None) -> JobFacts:
    """From the AM's JobView (tony_py/job/view.py) and its recent events, while it runs or at its end."""
    tasks = tuple(TaskFacts(
        name=t.name, type=t.type, state=t.state.value, tracked=t.tracked, host=t.container.host if t.container else None,
        started_at=t.started_at, finished_at=t.finished_at, exit_code=t.exit_code, signal=t.signal,
        metrics=dict(t.metrics)) for t in view.tasks)
    submitted = next((e["ts"] for e in events if e.get("kind") == "SUBMITTED"), None)
    return JobFacts(
        app_id=app_id, spec=view.spec, status=view.final_status or "RUNNING", tasks=tasks,
        failures=tuple(f.to_dict() for f in view.failures), events=tuple(events), submitted_at=submitted,
        finished_at=now if view.final_status else None, now=now, restarts_used=view.restarts_used,
        infra_restarts_used=view.infra_restarts_used, min_allocation_mb=min_allocation,
        max_allocation_mb=max_allocation)
