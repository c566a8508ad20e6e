"""A read-only view of a job at one moment, and what is said about it: the root cause and YARN's
diagnostics. The AM's coordinator fills a `JobView` under its lock (Coordinator.view()); the
status page, status.json (tony_py/am/core/report.py) and the history's job.json
(tony_py/history/summary.py) are made from it, never from the coordinator itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tony_py.config.spec import JobSpec
from tony_py.job.records import Container, Failure, TaskState


@dataclass(frozen=True)
class TaskView:
    name: str
    type: str
    index: int
    state: TaskState
    tracked: bool
    attempt: int
    container: Container | None  # the last container the task ran in
    address: str | None
    exit_code: int | None
    signal: str | None
    started_at: float | None
    finished_at: float | None
    metrics: dict = field(default_factory=dict)
    gpus: tuple[str, ...] = ()


@dataclass(frozen=True)
class JobView:
    spec: JobSpec
    state: str
    final_status: str | None  # SUCCEEDED | FAILED | KILLED once decided
    message: str  # the verdict's reason, "" before a verdict
    attempt: int
    restarts_used: int
    started_at: float
    stage: int
    tensorboard_url: str | None
    failures: tuple[Failure, ...]
    tasks: tuple[TaskView, ...]
    timeline: dict = field(default_factory=dict)
    events: tuple[dict, ...] = ()
    messages: tuple[str, ...] = ()
    infra_restarts_used: int = 0  # restarts after preemption or a lost node (not the user's retries)
    preemptions: int = 0
    dashboards: tuple[tuple[str, str, str], ...] = ()  # (task, name, url) of web UIs tasks serve (Ray's)

    def root_cause(self) -> Failure | None:
        return root_cause(self.failures)


_DASHBOARD_URL = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._~/\-]*)?$")
MAX_DASHBOARD_NAME = 40


def dashboards(callbacks: dict[str, dict]) -> tuple[tuple[str, str, str], ...]:
    """(task, name, url) of every web UI a task announced in its callback file
    ({"dashboard_url": ..., "dashboard_name": ...}: Ray's head does). The page links them, so
    only a plain http(s) address to a host is taken, and a short printable name."""
    out = []
    for task, info in sorted(callbacks.items()):
        url, name = info.get("dashboard_url"), info.get("dashboard_name") or "dashboard"
        if not isinstance(url, str) or not _DASHBOARD_URL.match(url):
            continue
        if not isinstance(name, str) or not name.isprintable() or len(name) > MAX_DASHBOARD_NAME:
            name = "dashboard"
        out.append((task, name, url))
    return tuple(out)


def root_cause(failures) -> Failure | None:
    """The earliest failure of the last attempt that failed: in a gang, the first task to die
    usually takes the others down with it, so later failures are consequences."""
    if not failures:
        return None
    last = max(f.attempt for f in failures)
    return min((f for f in failures if f.attempt == last), key=lambda f: f.time)


def diagnostics(view: JobView, details: bool = True) -> str:
    """The verdict, the root cause and the other failures. With details (the client's copy, the
    job's history), also the root cause's traceback and stderr tail; without (YARN's
    application diagnostics, which every user of a cluster without ACLs may read), not."""
    if view.final_status is None:
        return ""
    lines = [f"TonY-py job {view.final_status}: {view.message}"]
    cause = view.root_cause() if view.final_status != "SUCCEEDED" else None
    if cause is not None:
        lines.append(f"Root cause: {cause.headline()}")
        if details and cause.error and cause.error.get("traceback"):
            lines.append("--- traceback (from the task's error file) ---")
            lines.append(cause.error["traceback"].rstrip()[-3000:])
        if details and cause.stderr_tail:
            lines.append(f"--- last lines of {cause.task} stderr ---")
            lines.append(cause.stderr_tail.rstrip()[-4000:])
        elif cause.stderr_tail or (cause.error and cause.error.get("traceback")):
            lines.append(f"(its stderr and traceback: `tony logs <app> --task {cause.task} --file stderr`)")
    others = [f for f in view.failures if f is not cause]
    if others:
        lines.append(("Other failures (in order): " if cause else "Failures the job tolerated: ")
                     + "; ".join(f.headline() for f in others[:10]))
    lines.append("Tasks: " + ", ".join(f"{t.name} {t.state.value}" for t in view.tasks))
    return "\n".join(lines)
