"""The AM's job loop, whatever runs the containers: YARN through the JVM bridge (am/main.py), or
this machine (a single-node job's task, local mode).

It owns the coordinator, the HTTP server (executor API and status page) and the event queue:
cluster events (allocated, started, completed, …; their schema is cluster_events.py) arrive in
the queue, in their wire form, from whichever port runs the containers, and the loop hands them to the coordinator and ticks its clock until the job
is DONE.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from pathlib import Path
from typing import Any, Callable

from tony_py.advice import facts as advice_facts
from tony_py.advice import report as advice_report
from tony_py.am.cluster_events import (Allocated, ClusterEvent, Completed, NodesUpdated, Preemption,
                                      PreviousContainers, RequestsRejected, RmBack, RmError, ShutdownRequest,
                                      StartFailed, Started, StopFailed, Stopped, parse_event)
from tony_py.am.core import report
from tony_py.am.core.coordinator import Coordinator
from tony_py.am.core.events import EventLog
from tony_py.am.launch import JobMeta, TaskLauncher
from tony_py.am.http.server import AmHttpServer, JobFiles
from tony_py.job.view import TaskView
from tony_py.auth import Verifier
from tony_py.config.spec import JobSpec
from tony_py.config.yarnsite import allocation_limits

log = logging.getLogger("tony.am")

TICK_S = 0.2
ADVICE_EVERY_S = 10.0  # how often a running job's advice is worked out again (it changes slowly)


class Abandon(Exception):
    """This AM attempt must end without touching the tasks: YARN (or a later attempt) owns them."""


def placement_refused(detail: str) -> str:
    return ("the cluster refused placement constraints (yarn.resourcemanager.placement-constraints.handler is "
            "'disabled' on the ResourceManager): remove tony.*.placement-spec, or ask the cluster's admins to set "
            f"it to 'scheduler' or 'placement-processor'. YARN: {detail.splitlines()[0][:300] if detail else ''}")


def _rm_error(coordinator: Coordinator, event: RmError) -> None:
    if "placement constraint" in event.message.lower() or "SchedulingRequest" in event.message:
        coordinator.fail_job(placement_refused(event.message))  # the RM is there; it refused the request
    else:
        raise Abandon(f"lost the ResourceManager: {event.message}")


def _shutdown_request(coordinator: Coordinator, event: ShutdownRequest) -> None:
    raise Abandon("the ResourceManager asked this AM attempt to shut down")


def _noted(coordinator: Coordinator, event: ClusterEvent) -> None:
    log.debug("event %s", event)


# Each kind of cluster event to what the coordinator does with it (test_cluster_events checks
# that every kind has its handler). The coordinator reads containers and nodes as dicts.
HANDLERS: dict[type[ClusterEvent], Callable[[Coordinator, Any], None]] = {
    Allocated: lambda c, e: c.on_allocated(e.container.to_dict()),
    Started: lambda c, e: c.on_started(e.container_id),
    StartFailed: lambda c, e: c.on_start_failed(e.container_id, e.message),
    Completed: lambda c, e: c.on_completed(e.container_id, e.exit_status, e.diagnostics or ""),
    RmBack: lambda c, e: c.on_rm_back(e.silent_ms / 1000),
    NodesUpdated: lambda c, e: c.on_nodes_updated([n.to_dict() for n in e.nodes]),
    ShutdownRequest: _shutdown_request,
    RmError: _rm_error,
    Preemption: lambda c, e: c.on_preemption(list(e.containers), e.wait_ms),
    PreviousContainers: lambda c, e: c.on_previous_containers([x.to_dict() for x in e.containers]),
    RequestsRejected: lambda c, e: c.on_requests_rejected(e.allocation_request_id, e.reason),
    Stopped: _noted,
    StopFailed: _noted,
}


def dispatch(coordinator: Coordinator, data: dict) -> None:
    """One event from the queue (its wire form), checked, to the coordinator. A malformed one
    raises EventError (the attempt ends: the JVM and this code disagree); an unknown kind is
    logged and skipped."""
    event = parse_event(data)
    if event is None:
        log.warning("unknown event %s", data)
        return
    HANDLERS[type(event)](coordinator, event)


class AmRuntime:
    def __init__(self, spec: JobSpec, meta: JobMeta, secret: str, host: str, bind_ip: str,
                 trusted_addresses: frozenset[str] = frozenset(), extra_status: Callable[[], dict] = dict,
                 log_url: Callable[[TaskView], str | None] = lambda t: None, events: EventLog | None = None,
                 final_conf: str | None = None, src_zip: Path | None = None, src_ready=lambda: None,
                 rm_silence: Callable[[], float] | None = None, rm_silence_limit_s: float = float("inf"),
                 proxy_viewer: Callable[[str | None], bool] = lambda user: True):
        """final_conf (tony-final.xml's text) and src_zip (the zipped src_dir) are what executors
        fetch before registering (GET /v1/job, /v1/src), when the AM serves them (not None);
        src_ready() blocks until src_zip is there."""
        self.spec = spec
        self.meta = meta
        self.host = host
        self.queue: queue.Queue[dict] = queue.Queue()
        self.verifier = Verifier(secret)
        self.extra_status = extra_status
        self.log_url = log_url
        self.coordinator: Coordinator | None = None
        # How long the RM has not answered this attempt (None: no RM, local mode), and how long
        # it may before the AM stops renewing its executors' leases (Coordinator.lose_rm).
        self.rm_silence = rm_silence
        self.rm_silence_limit_s = rm_silence_limit_s
        self.events = events or EventLog()
        self._launcher: TaskLauncher | None = None
        self._advice: tuple[str | None, float, list[dict]] | None = None  # (final status, when, findings)
        self._min_allocation, self._max_allocation = allocation_limits()  # (the NodeManager's yarn-site)
        job_files = None if final_conf is None else JobFiles(
            json.dumps({"spec": spec.to_dict(), "final_conf": final_conf}).encode(), src_zip, src_ready)
        self.server = AmHttpServer((bind_ip, 0), None, self.verifier, self.status,
                                   trusted_addresses=trusted_addresses, max_connections=2 * len(spec.tasks()) + 64,
                                   job_files=job_files, proxy_viewer=proxy_viewer)
        self.url = f"http://{host}:{self.server.port}"
        self.verifier.receiver = f"{host}:{self.server.port}"  # as executors and clients address it
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1}, name="am-http",
                         daemon=True).start()

    def attach(self, port) -> Coordinator:
        """Create the coordinator on the port that runs the containers."""
        self._launcher = TaskLauncher(self.spec, self.meta, self.host, self.server.port)
        self.coordinator = Coordinator(self.spec, port, self._launcher.build, events=self.events)
        self.coordinator.auth_last_seen = self.verifier.last_seen
        self.server.coordinator = self.coordinator
        return self.coordinator

    def status(self, trusted: bool) -> dict:
        if self.coordinator is None:
            data = {"state": "STARTING", "tasks": []}
        else:
            data = self.coordinator.status(self.log_url)
            if trusted:  # (advice names hosts and sizes: the job's own viewers only)
                data["advice"] = self.advice()
        data.update(app_id=self.meta.app_id, name=self.spec.name, **self.extra_status())
        return data if trusted else report.public_view(data)

    def advice(self) -> list[dict]:
        """The job's findings (tony_py/advice): worked out at most every ADVICE_EVERY_S while it
        runs, once more when it is decided, then kept."""
        now, decided = time.time(), self.coordinator.final_status is not None
        if self._advice is not None:
            was_decided, at, findings = self._advice
            if was_decided or (not decided and now - at < ADVICE_EVERY_S):
                return findings
        try:
            facts = advice_facts.from_view(self.coordinator.view(), self.events.milestones(), now,
                                           self._min_allocation, self.meta.app_id, self._max_allocation)
            findings = [f.to_dict() for f in advice_report.advise(facts)]
        except Exception:  # noqa: BLE001 - advice is an extra: never the status page's or the verdict's end
            log.exception("working out the job's advice failed; it has none")
            findings = []
        self._advice = (decided, now, findings)
        return findings

    def run(self, stop: threading.Event) -> None:
        """Until the job is DONE: cluster events to the coordinator, and the clock."""
        c = self.coordinator
        while not c.done:
            if stop.is_set():
                raise Abandon("the AM received SIGTERM")
            try:
                dispatch(c, self.queue.get(timeout=TICK_S))
                while True:
                    dispatch(c, self.queue.get_nowait())
            except queue.Empty:
                pass
            self._watch_rm(c)
            c.tick()

    def _watch_rm(self, c: Coordinator) -> None:
        """An AM the RM has not answered for half its expiry may already be replaced by the next
        attempt: it stops answering its executors (their leases run out; fencing.py) until the RM
        answers again."""
        if self.rm_silence is None:
            return
        silent = self.rm_silence()
        if silent > self.rm_silence_limit_s and c.rm_lost is None:
            c.lose_rm(f"the ResourceManager has not answered this AM attempt for {silent:.1f} s: it may already "
                      "have started the next attempt")
        elif silent <= self.rm_silence_limit_s and c.rm_lost is not None:
            c.regain_rm()

    def wait_for_final_read(self) -> None:
        """Let a following client read the final task table before the tracking URL goes away."""
        self.server.final_status_served.wait(timeout=self.spec.client_stop_wait_s)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
