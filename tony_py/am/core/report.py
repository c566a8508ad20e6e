"""What the AM tells people about the job: status.json and the page behind the tracking URL
(full detail), and the view of it anyone who can reach the AM may read (states only). Made from
a JobView (tony_py/job/view.py), which the coordinator fills under its lock.
"""

from __future__ import annotations

from typing import Callable

from tony_py.job.view import JobView, TaskView, diagnostics

LogUrl = Callable[[TaskView], "str | None"]

# Fields of status.json that anyone who can reach the AM may read (no hosts, logs or errors).
PUBLIC_JOB_FIELDS = ("app_id", "name", "state", "final_status", "attempt", "restarts_used", "framework",
                     "am_attempt")
PUBLIC_TASK_FIELDS = ("name", "type", "index", "state", "tracked", "attempt")


def task_row(t: TaskView, log_url: LogUrl) -> dict:
    c = t.container
    return {
        "name": t.name,
        "type": t.type,
        "index": t.index,
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


def status(view: JobView, log_url: LogUrl) -> dict:
    cause = view.root_cause()
    return {
        "state": view.state,
        "final_status": view.final_status,
        "attempt": view.attempt,
        "restarts_used": view.restarts_used,
        "restarts_allowed": view.spec.am_retry_count,
        "infra_restarts_used": view.infra_restarts_used,
        "infra_restarts_allowed": view.spec.max_infrastructure_restarts,
        "preemptions": view.preemptions,
        "framework": view.spec.framework,
        "diagnostics": diagnostics(view) if view.final_status else None,
        "root_cause": cause.to_dict() if cause else None,
        "failures": [f.to_dict() for f in view.failures],
        "timeline": dict(view.timeline),
        "messages": list(view.messages),
        "stage": view.stage,
        "tensorboard_url": view.tensorboard_url,
        "dashboards": [{"task": task, "name": name, "url": url} for task, name, url in view.dashboards],
        "queue": view.spec.queue,
        "started_at": view.started_at,
        "events": list(view.events),
        "tasks": [task_row(t, log_url) for t in view.tasks],
    }


def proxy_viewers(owner: str, view_acls: tuple[str, ...], acls_enabled: bool) -> Callable[[str | None], bool]:
    """Who sees full detail through YARN's web proxy, as MapReduce's AM decides with its view ACL:
    where the cluster enforces ACLs (yarn.acl.enable), the job's owner and the users of
    tony.application.view-acls ("*": everyone), named by the proxy's proxy-user cookie (as
    Hadoop's AmIpFilter reads it; no cookie: nobody); where it does not, everyone, as YARN itself
    then shows every job to everyone (its web UI's anonymous user, dr.who, included)."""
    def allowed(user: str | None) -> bool:
        if not acls_enabled:
            return True
        return user is not None and (user == owner or "*" in view_acls or user in view_acls)
    return allowed


def proxy_user(cookie_header: str | None) -> str | None:
    """The user YARN's web proxy relays for (its proxy-user cookie), or None."""
    from http.cookies import CookieError, SimpleCookie
    from urllib.parse import unquote_plus

    if not cookie_header:
        return None
    try:
        morsel = SimpleCookie(cookie_header).get("proxy-user")
    except CookieError:
        return None
    return unquote_plus(morsel.value) if morsel is not None and morsel.value else None


def public_view(full: dict) -> dict:
    """What anyone who can reach the AM may see: states, no hosts, logs or error text."""
    view = {k: full.get(k) for k in PUBLIC_JOB_FIELDS}
    view["tasks"] = [{k: t.get(k) for k in PUBLIC_TASK_FIELDS} for t in full.get("tasks", [])]
    view["detail"] = "states only: open this page through YARN's proxy (the tracking URL) for the rest"
    return view
