"""The Python ApplicationMaster: started by the Java AM (io.tonypy.am.ApplicationMaster).

Wires the pieces together: the Py4J gateway to the JVM that talks to YARN, the coordinator
that owns the job, the HTTP server for executors and the tracking URL, and the main loop that
relays RM/NM events and the clock to the coordinator until the job is decided.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from py4j.java_gateway import GatewayParameters, JavaGateway
from py4j.protocol import Py4JError, Py4JJavaError

from tony_py import appsecret
from tony_py.advice import report as advice_report
from tony_py.advice.model import Finding
from tony_py.am.core.coordinator import Coordinator
from tony_py.am.core.recovery import BURST_HEARTBEAT_MS
from tony_py.am.core import events as ev
from tony_py.am.core import report
from tony_py.am import tokens
from tony_py.am.history import HistoryWriter
from tony_py.am.launch import JOB_META_FILE, JobMeta
from tony_py.am.local import LocalProcessPort
from tony_py.am.runtime import Abandon, AmRuntime, placement_refused
from tony_py.am.core.tasks import Task
from tony_py.am.yarn import BridgePort, StateStore, proxy_addresses, pump
from tony_py.job.view import TaskView
from tony_py.auth import AuthError, Signer, call_json
from tony_py.bridge.gateway import java_error
from tony_py.bridge.jvm import HDFS_CLOSE_RETRY
from tony_py.history.summary import job_summary
from tony_py.net import wire
from tony_py.config.spec import FINAL_CONF_FILE, SPEC_FILE, JobSpec

log = logging.getLogger("tony.am")

# The RM ends an AM attempt it has not heard from for yarn.am.liveness-monitor.expiry-interval-ms
# and may start the next one: after half that without an answer, this attempt stops renewing its
# executors' leases (AmRuntime._watch_rm), never sooner than this.
RM_SILENCE_MIN_S = 3.0


def _fetch_src(bridge, meta: JobMeta) -> tuple[Path, Callable[[], object]]:
    """The src_dir archive the AM serves, downloaded from the staging dir in the background (a
    localized copy would make the AM's container wait for a localizer, ~0.2 s); and what waits
    for it. An archive localized by an older client's job is used as it is."""
    target = Path.cwd() / meta.src_zip
    done: Future = Future()
    if target.exists() or not meta.src_path:
        done.set_result(None)
        return target.resolve(), done.result

    def download() -> None:
        try:
            bridge.fs().download(meta.src_path, str(target))
            done.set_result(None)
        except BaseException as exc:  # noqa: BLE001 - each request for the archive reports it
            done.set_exception(exc)

    threading.Thread(target=download, name="am-src-fetch", daemon=True).start()
    return target, done.result


def log_url_for(user: str):
    def url(task: TaskView) -> str | None:
        c = task.container
        if c is None or not c.node_http:
            return None
        return f"http://{c.node_http}/node/containerlogs/{c.id}/{user}"

    return url


def own_log_url(user: str) -> str:
    """The AM container's own log page."""
    return (f"http://{os.environ.get('NM_HOST')}:{os.environ.get('NM_HTTP_PORT')}/node/containerlogs/"
            f"{os.environ.get('CONTAINER_ID')}/{user}")


def single_node_log_url(user: str):
    """A single-node job's task writes its logs into the AM container's log dir."""
    own = own_log_url(user)
    return lambda task: own if task.container is not None else None


def notify_executors(tasks: list[Task], am_url: str, signer: Signer) -> None:
    """Tell re-adopted executors where the new AM attempt listens (their control endpoint)."""
    for task in tasks:
        try:
            moved = wire.AmMoved(url=am_url)
            status, _ = call_json(signer, task.control_url, moved.METHOD, moved.PATH, moved.to_body(), timeout=5)
            if status != 200:
                raise OSError(f"HTTP {status}")
        except (OSError, AuthError, ValueError) as exc:  # its heartbeat timeout will catch it
            log.warning("could not reach the executor of %s at %s: %s", task.name, task.control_url, exc)


@dataclass
class Attempt:
    """This AM attempt and what it runs the job with."""

    bridge: object  # the JVM's AmBridge
    spec: JobSpec
    meta: JobMeta
    number: int  # YARN's attempt number, from 1
    host: str
    user: str
    secret: str
    store: StateStore
    am: AmRuntime
    history: HistoryWriter | None = None
    submitted_at: float | None = None

    @property
    def tracking_url(self) -> str:
        return self.am.url + "/"


def connect() -> Attempt:
    """The JVM's gateway, the job's files, and the runtime that will serve it (not started yet)."""
    gateway_secret = os.environ.pop("TONY_GATEWAY_SECRET")
    secret = appsecret.take()
    # The JVM started this process before its gateway (ApplicationMaster.java): the port comes on
    # stdin once the gateway listens; an empty line is a JVM that died first.
    port = sys.stdin.readline().strip()
    if not port.isdigit():
        raise SystemExit("the AM's JVM stopped before its gateway listened (see the lines above)")
    gateway = JavaGateway(gateway_parameters=GatewayParameters(
        address="127.0.0.1", port=int(port), auth_token=gateway_secret,
        auto_convert=True))
    bridge = gateway.entry_point
    bridge.defaultsUnlessConfigured(json.dumps(HDFS_CLOSE_RETRY))  # before any HDFS write
    number = bridge.attemptNumber()
    spec = JobSpec.from_dict(json.loads(appsecret.job_file(SPEC_FILE)))
    meta = JobMeta.from_json(json.loads(appsecret.job_file(JOB_META_FILE)))
    log.info("AM for %s attempt %d: %s, %d tasks", meta.app_id, number, spec.framework, len(spec.tasks()))
    host = os.environ.get("NM_HOST") or socket.getfqdn()
    # the secret goes into task containers' credentials, under the alias executors look for
    bridge.start(BURST_HEARTBEAT_MS, appsecret.CREDENTIALS_ALIAS, secret)
    store = StateStore(bridge.fs(), meta.staging_dir)
    src_zip, src_ready = _fetch_src(bridge, meta) if meta.src_from_am else (None, lambda: None)
    user = os.environ.get("USER") or meta.user
    final_conf = appsecret.job_file(FINAL_CONF_FILE)
    am = AmRuntime(spec, meta, secret, host, socket.gethostbyname(host), proxy_addresses(bridge),
                   final_conf=final_conf if meta.files_from_am else None,
                   src_zip=src_zip, src_ready=src_ready,
                   extra_status=lambda: {"am_attempt": number, "snapshot_current": store.current(am.coordinator),
                                         "user": user, "am_log_url": own_log_url(user)},
                   log_url=single_node_log_url(user) if spec.single_node else log_url_for(user),
                   rm_silence=lambda: bridge.rmSilentMs() / 1000,
                   proxy_viewer=report.proxy_viewers(user, spec.view_acls, bridge.aclsEnabled()),
                   rm_silence_limit_s=max(RM_SILENCE_MIN_S, bridge.amExpiryMs() / 2000))
    # With the submitter's keytab: new delegation tokens before the old ones expire (tokens.py).
    token_service = tokens.start(bridge, secret, host, socket.gethostbyname(host), Path.cwd(), number)
    am.server.token_offer = token_service.offer if token_service else None
    submitted_ms = os.environ.get("APP_SUBMIT_TIME_ENV")
    attempt = Attempt(bridge, spec, meta, number, host, user, secret, store, am,
                      submitted_at=int(submitted_ms) / 1000 if submitted_ms else None)
    if spec.history_intermediate:
        attempt.history = HistoryWriter(bridge.fs(), spec.history_intermediate, spec.history_finished, meta.app_id,
                                        number, spec.history_retention_s)
        am.events.listeners.append(attempt.history)
        attempt.history.start(final_conf)
    if attempt.submitted_at and number == 1:
        am.events.record(ev.SUBMITTED, f"submitted by {user}", at=attempt.submitted_at)
    am.events.record(ev.AM_STARTED, f"AM attempt {number} on {host}", am_attempt=number, host=host)
    return attempt


def cluster_port(a: Attempt):
    if not a.spec.single_node:
        return BridgePort(a.bridge, a.spec)
    # TonY: the AM's own container runs the command. Here a local executor does, in a directory
    # beside the AM's with links to the AM's localized files, so exit code, stderr tail, error
    # file and restarts work as for any task.
    log_dir = Path((os.environ.get("LOG_DIRS") or ".").split(",")[0])
    return LocalProcessPort(Path.cwd() / "tasks", a.host, a.am.queue.put, lambda name, _res: Path.cwd() / name,
                            a.secret, log_dir_for=lambda _cid: log_dir, on_progress=a.bridge.setProgress,
                            prefix=a.meta.app_id.removeprefix("application_"))


def register(a: Attempt) -> tuple[dict, str | None]:
    """Register with the RM: its answer, and why the job must fail at once (or None)."""
    try:
        return json.loads(a.bridge.register(a.host, a.am.server.port, a.tracking_url, a.spec.placement_spec)), None
    except Py4JJavaError as exc:
        if not a.spec.placement_spec:
            raise
        # The RM refuses application-wide constraints when its placement handler is disabled:
        # register without them and fail the job with one clear line (not attempt after attempt).
        refused = placement_refused(str(exc.java_exception))
        return json.loads(a.bridge.register(a.host, a.am.server.port, a.tracking_url, None)), refused


def take_over(a: Attempt, coordinator: Coordinator, previous: list[dict]) -> None:
    """A later attempt: adopt the earlier one's tasks from its snapshot, or start over."""
    snapshot = a.store.load() if a.number > 1 else None
    if snapshot is not None and not a.spec.single_node:
        a.am.verifier.restore(snapshot.auth_last_seen)
        adopted = coordinator.adopt(snapshot, previous)
        threading.Thread(target=notify_executors, daemon=True,
                         args=(adopted, a.am.url, Signer(a.secret, f"am-{a.number}"))).start()
    elif a.number > 1:
        log.warning("no snapshot from the earlier attempt: starting the job over")
        coordinator.start_over(previous)


def supervise(a: Attempt, coordinator: Coordinator, port, refused: str | None) -> bool:
    """Run the job until it is decided; False if this attempt must end without deciding it."""
    stop_requested, pumping = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    threading.Thread(target=pump, args=(a.bridge, a.am.queue, pumping), name="am-events", daemon=True).start()
    coordinator.start()
    if refused:
        coordinator.fail_job(refused)
    a.store.start(coordinator)
    try:
        # The NodeManager stops this container with SIGTERM (application killed, AM over its
        # memory, node going down): the tasks are left alone. YARN kills them if the application
        # is over, and a next attempt re-adopts them if it is not.
        a.am.run(stop_requested)
    except Abandon as exc:
        log.error("ending this AM attempt: %s", exc)
        try:  # leave the next attempt the latest task table, if there is time
            a.store.stop(coordinator, timeout_s=1.0)
        except Exception:  # noqa: BLE001 - the JVM may already be going away
            pass
        return False
    finally:
        pumping.set()
        if isinstance(port, LocalProcessPort):
            port.shutdown()
    a.store.stop(coordinator)
    return True


def conclude(a: Attempt, coordinator: Coordinator) -> None:
    """The job is decided: let the client read the end, write history, unregister, clean up."""
    final = coordinator.final_status or "FAILED"
    diagnostics = coordinator.diagnostics(details=a.spec.diagnostics_include_logs)  # YARN's: every user reads them
    log.info("job %s\n%s", final, diagnostics)
    a.am.wait_for_final_read()
    if a.history is not None:  # complete before YARN reports the end, so a reader then finds it final
        a.am.events.record(ev.APP_FINISHED, f"job {final}", status=final)
        summary = job_summary(
            coordinator.view(), app_id=a.meta.app_id, user=a.user, finished_at=time.time(), am_attempt=a.number,
            submitted_at=a.submitted_at, tracking_url=a.tracking_url, am_log_url=own_log_url(a.user),
            log_url=a.am.log_url, state_events=a.history.states)
        advice = a.am.advice()  # kept with the job: the portal lists the jobs that wasted most
        summary.update(advice=advice, waste=advice_report.waste([Finding.from_dict(f) for f in advice]))
        a.history.finish(summary)
    a.bridge.unregister(final, diagnostics[:60000], a.tracking_url)
    try:
        a.bridge.fs().delete(a.meta.staging_dir, True)
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort; the client retries
        log.warning("could not delete the staging dir %s: %s", a.meta.staging_dir, exc)
    a.am.close()


def run() -> int:
    attempt = connect()
    port = cluster_port(attempt)
    coordinator = attempt.am.attach(port)
    reg, refused = register(attempt)
    log.info("registered with the RM; tracking URL %s; max container %s", attempt.tracking_url,
             reg.get("max_capability"))
    coordinator.timeline["am_registered"] = time.time()
    take_over(attempt, coordinator, reg.get("previous_containers") or [])
    if not supervise(attempt, coordinator, port, refused):
        return 1
    conclude(attempt, coordinator)
    return 0


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        code = run()
    except Py4JJavaError as exc:  # a call into the JVM threw: say what Java said
        log.error("a call into the AM's JVM failed: %s", java_error(exc))
        code = 1
    except Py4JError as exc:  # the AM's JVM is gone (killed, or crashed), or refused the call
        log.error("the AM's JVM failed: %s", " | ".join(str(exc).strip().splitlines()[:3]))
        code = 1
    except Exception:
        log.exception("the Python AM failed")
        code = 1
    sys.exit(code)
