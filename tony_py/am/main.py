"""The Python ApplicationMaster: started by the Java AM (io.tonypy.am.ApplicationMaster).

Wires the pieces together: the Py4J gateway to the JVM that talks to YARN, the coordinator
that owns the job, the HTTP server for executors and the tracking URL, and the main loop that
relays RM/NM events and the clock to the coordinator until the job is decided.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import signal
import socket
import sys
import threading
import time
from pathlib import Path

from py4j.java_gateway import GatewayParameters, JavaGateway
from py4j.protocol import Py4JError, Py4JJavaError

from tony_py import appsecret
from tony_py.am.coordinator import FAST_HEARTBEAT_MS, Coordinator
from tony_py.am import events as ev
from tony_py.am.failover import AmSnapshot
from tony_py.am.history import HistoryWriter
from tony_py.am.launch import JobMeta
from tony_py.am.local import LocalProcessPort
from tony_py.am.runtime import Abandon, AmRuntime, placement_refused
from tony_py.am.tasks import Task
from tony_py.auth import AuthError, Signer, call_json
from tony_py.bridge.gateway import java_error
from tony_py.bridge.jvm import HDFS_CLOSE_RETRY
from tony_py.history.summary import job_summary
from tony_py.config.spec import FINAL_CONF_FILE, SPEC_FILE, JobSpec, TaskType

log = logging.getLogger("tony.am")

JOB_META = "tony-job.json"
STATE_FILE = "am-state.json"
POLL_MS = 200


class BridgePort:
    """The coordinator's ClusterPort, backed by the Java AmBridge over Py4J."""

    def __init__(self, bridge, spec: JobSpec):
        self.bridge = bridge
        self.spec = spec

    def request(self, request_id: int, task_type: TaskType, count: int) -> None:
        r = task_type.resources
        if self.spec.scheduling_requests:  # SchedulingRequests: YARN places them by their constraint
            self.bridge.requestPlaced(request_id, request_id, r.memory_mb, r.vcores, r.gpus,
                                      list(task_type.allocation_tags or (task_type.name,)), task_type.placement_spec,
                                      count)
            return
        label = task_type.node_label or self.spec.node_label
        self.bridge.request(request_id, request_id, r.memory_mb, r.vcores, r.gpus, label, count)

    def cancel_requests(self, request_id: int) -> None:
        self.bridge.cancelRequests(request_id)

    def launch(self, container_id: str, launch_spec: dict) -> None:
        self.bridge.launch(container_id, json.dumps(launch_spec))

    def stop(self, container_id: str) -> None:
        self.bridge.stop(container_id)

    def release(self, container_id: str) -> None:
        self.bridge.release(container_id)

    def set_progress(self, progress: float) -> None:
        self.bridge.setProgress(float(progress))

    def set_heartbeat_interval(self, ms: int) -> None:
        self.bridge.setHeartbeatInterval(int(ms))

    def blacklist(self, node_id: str) -> None:
        self.bridge.updateBlacklist([node_id], [])


def load_spec(path: Path) -> JobSpec:
    return JobSpec.from_dict(json.loads(path.read_text()))


def log_url_for(user: str):
    def url(task: Task) -> str | None:
        c = task.last_container
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
    return lambda task: own if task.last_container is not None else None


def notify_executors(tasks: list[Task], am_url: str, signer: Signer) -> None:
    """Tell re-adopted executors where the new AM attempt listens (their control endpoint)."""
    for task in tasks:
        try:
            status, _ = call_json(signer, task.control_url, "POST", "/v1/am", {"url": am_url}, timeout=5)
            if status != 200:
                raise OSError(f"HTTP {status}")
        except (OSError, AuthError, ValueError) as exc:  # its heartbeat timeout will catch it
            log.warning("could not reach the executor of %s at %s: %s", task.name, task.control_url, exc)


def proxy_addresses(bridge) -> frozenset[str]:
    """The IP addresses YARN's web proxy connects from (Hadoop's AmIpFilter trusts the same)."""
    addresses = set()
    for host_port in bridge.proxyHosts():
        host = host_port.rsplit(":", 1)[0]
        try:
            addresses.update(info[4][0] for info in socket.getaddrinfo(host, None))
        except OSError as exc:
            log.warning("cannot resolve the web proxy host %s: %s", host, exc)
    return frozenset(addresses)


class StateStore:
    """The coordinator's snapshot in the staging dir, for the next AM attempt. Written from its
    own thread: an HDFS write can take a second (the first one loads the whole client), and the
    event loop must not wait for it."""

    def __init__(self, fs, staging_dir: str):
        self.fs = fs
        self.path = f"{staging_dir}/{STATE_FILE}"
        self.saving = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def load(self) -> AmSnapshot | None:
        try:
            if not self.fs.exists(self.path):
                return None
            return AmSnapshot.from_dict(json.loads(self.fs.readText(self.path)))
        except Exception as exc:  # noqa: BLE001 - a bad snapshot means starting over
            log.warning("cannot use %s: %s", self.path, exc)
            return None

    def save(self, coordinator: Coordinator) -> None:
        self.saving = True
        try:
            self.fs.writeTextAtomic(self.path, json.dumps(coordinator.snapshot().to_dict()))
        except Exception as exc:  # noqa: BLE001 - fail-over is best effort
            coordinator.dirty = True  # try again on the next round
            log.warning("cannot write %s: %s", self.path, exc)
        finally:
            self.saving = False

    def current(self, coordinator: Coordinator) -> bool:
        """Whether a later attempt would find the task table as it is now."""
        return not coordinator.dirty and not self.saving

    def start(self, coordinator: Coordinator, interval_s: float = 0.5) -> None:
        def loop():
            while not self._stop.wait(interval_s):
                if coordinator.dirty:
                    self.save(coordinator)

        self._thread = threading.Thread(target=loop, name="am-state", daemon=True)
        self._thread.start()

    def stop(self, coordinator: Coordinator, timeout_s: float = 10.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
        if coordinator.dirty and not self.saving:
            self.save(coordinator)


def pump(bridge, events: queue.Queue, stop: threading.Event) -> None:
    """RM/NM events from the JVM into the AM's queue (its own thread: the loop never blocks on the JVM)."""
    while not stop.is_set():
        try:
            for event in json.loads(bridge.poll(POLL_MS)):
                events.put(event)
        except Py4JError as exc:
            if not stop.is_set():
                events.put({"type": "rm_error", "message": f"the AM's JVM is gone: {str(exc).splitlines()[0]}"})
            return


def run() -> int:
    gateway_port = int(os.environ["TONY_GATEWAY_PORT"])
    gateway_secret = os.environ.pop("TONY_GATEWAY_SECRET")
    app_secret = appsecret.take()
    gateway = JavaGateway(
        gateway_parameters=GatewayParameters(
            address="127.0.0.1", port=gateway_port, auth_token=gateway_secret, auto_convert=True
        )
    )
    bridge = gateway.entry_point
    bridge.defaultsUnlessConfigured(json.dumps(HDFS_CLOSE_RETRY))  # before any HDFS write
    am_attempt = bridge.attemptNumber()
    spec = load_spec(Path(SPEC_FILE))
    meta = JobMeta.from_json(json.loads(Path(JOB_META).read_text()))
    log.info("AM for %s attempt %d: %s, %d tasks", meta.app_id, am_attempt, spec.framework, len(spec.tasks()))

    host = os.environ.get("NM_HOST") or socket.getfqdn()
    # the secret goes into task containers' credentials, under the alias executors look for
    bridge.start(FAST_HEARTBEAT_MS, appsecret.CREDENTIALS_ALIAS, app_secret)
    store = StateStore(bridge.fs(), meta.staging_dir)
    user = os.environ.get("USER") or meta.user
    final_conf = Path(FINAL_CONF_FILE).read_text()
    am = AmRuntime(spec, meta, app_secret, host, socket.gethostbyname(host), proxy_addresses(bridge),
                   final_conf=final_conf if meta.files_from_am else None,
                   src_zip=Path(meta.src_zip).resolve() if meta.src_from_am else None,
                   extra_status=lambda: {"am_attempt": am_attempt, "snapshot_current": store.current(am.coordinator),
                                         "user": user, "am_log_url": own_log_url(user)},
                   log_url=single_node_log_url(user) if spec.single_node else log_url_for(user))
    history = None
    if spec.history_intermediate:
        history = HistoryWriter(bridge.fs(), spec.history_intermediate, spec.history_finished, meta.app_id, am_attempt,
                                spec.history_retention_s)
        am.events.listeners.append(history)
        history.start(final_conf)
    submitted_ms = os.environ.get("APP_SUBMIT_TIME_ENV")
    if submitted_ms and am_attempt == 1:
        am.events.record(ev.SUBMITTED, f"submitted by {user}", at=int(submitted_ms) / 1000)
    am.events.record(ev.AM_STARTED, f"AM attempt {am_attempt} on {host}", am_attempt=am_attempt, host=host)
    if spec.single_node:
        # TonY: the AM's own container runs the command. Here a local executor does, in a
        # directory beside the AM's with links to the AM's localized files, so exit code, stderr
        # tail, error file and restarts work as for any task.
        log_dir = Path((os.environ.get("LOG_DIRS") or ".").split(",")[0])
        port = LocalProcessPort(Path.cwd() / "tasks", host, am.queue.put, lambda name, _res: Path.cwd() / name,
                                app_secret, log_dir_for=lambda _cid: log_dir, on_progress=bridge.setProgress,
                                prefix=meta.app_id.removeprefix("application_"))
    else:
        port = BridgePort(bridge, spec)
    coordinator = am.attach(port)
    tracking_url = am.url + "/"
    refused = None
    try:
        reg = json.loads(bridge.register(host, am.server.port, tracking_url, spec.placement_spec))
    except Py4JJavaError as exc:
        if not spec.placement_spec:
            raise
        # The RM refuses application-wide constraints when its placement handler is disabled:
        # register without them and fail the job with one clear line (not attempt after attempt).
        refused = placement_refused(str(exc.java_exception))
        reg = json.loads(bridge.register(host, am.server.port, tracking_url, None))
    log.info("registered with the RM; tracking URL %s; max container %s", tracking_url, reg.get("max_capability"))
    coordinator.timeline["am_registered"] = time.time()

    snapshot = store.load() if am_attempt > 1 else None
    if snapshot is not None and not spec.single_node:
        am.verifier.restore(snapshot.auth_last_seen)
        adopted = coordinator.adopt(snapshot, reg.get("previous_containers") or [])
        threading.Thread(target=notify_executors, daemon=True,
                         args=(adopted, am.url, Signer(app_secret, f"am-{am_attempt}"))).start()
    elif am_attempt > 1:
        log.warning("no snapshot from the earlier attempt: starting the job over")
        for container in reg.get("previous_containers") or []:
            bridge.stop(container["id"])

    stop_requested, pumping = threading.Event(), threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    threading.Thread(target=pump, args=(bridge, am.queue, pumping), name="am-events", daemon=True).start()
    coordinator.start()
    if refused:
        coordinator.fail_job(refused)
    store.start(coordinator)
    try:
        # The NodeManager stops this container with SIGTERM (application killed, AM over its
        # memory, node going down): the tasks are left alone. YARN kills them if the application
        # is over, and a next attempt re-adopts them if it is not.
        am.run(stop_requested)
    except Abandon as exc:
        log.error("ending this AM attempt: %s", exc)
        try:  # leave the next attempt the latest task table, if there is time
            store.stop(coordinator, timeout_s=1.0)
        except Exception:  # noqa: BLE001 - the JVM may already be going away
            pass
        return 1
    finally:
        if isinstance(port, LocalProcessPort):
            port.shutdown()
    store.stop(coordinator)

    final = coordinator.final_status or "FAILED"
    diagnostics = coordinator.diagnostics()
    log.info("job %s\n%s", final, diagnostics)
    am.wait_for_final_read()
    pumping.set()
    if history is not None:  # complete before YARN reports the end, so a reader then finds it final
        am.events.record(ev.APP_FINISHED, f"job {final}", status=final)
        history.finish(job_summary(
            coordinator, app_id=meta.app_id, user=user, finished_at=time.time(), am_attempt=am_attempt,
            submitted_at=int(submitted_ms) / 1000 if submitted_ms else None, tracking_url=tracking_url,
            am_log_url=own_log_url(user), log_url=am.log_url, state_events=history.states))
    bridge.unregister(final, diagnostics[:60000], tracking_url)
    try:
        bridge.fs().delete(meta.staging_dir, True)
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort; the client retries
        log.warning("could not delete the staging dir %s: %s", meta.staging_dir, exc)
    am.close()
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
