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
from pathlib import Path

from py4j.java_gateway import GatewayParameters, JavaGateway
from py4j.protocol import Py4JError

from tony_py import appsecret
from tony_py.auth import AuthError, Signer, Verifier, call_json
from tony_py.am import report
from tony_py.am.coordinator import FAST_HEARTBEAT_MS, Coordinator
from tony_py.am.failover import AmSnapshot
from tony_py.am.launch import JobMeta, TaskLauncher
from tony_py.am.server import AmHttpServer
from tony_py.am.tasks import Task
from tony_py.config.spec import SPEC_FILE, JobSpec, TaskType

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
        label = task_type.node_label or self.spec.node_label
        r = task_type.resources
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


class Abandon(Exception):
    """This AM attempt must end without touching the tasks: YARN (or a later attempt) owns them."""


def dispatch(coordinator: Coordinator, event: dict) -> None:
    kind = event.get("type")
    if kind == "allocated":
        coordinator.on_allocated(event["container"])
    elif kind == "started":
        coordinator.on_started(event["container_id"])
    elif kind == "start_failed":
        coordinator.on_start_failed(event["container_id"], event.get("message", ""))
    elif kind == "completed":
        coordinator.on_completed(event["container_id"], int(event["exit_status"]), event.get("diagnostics") or "")
    elif kind == "nodes_updated":
        coordinator.on_nodes_updated(event.get("nodes") or [])
    elif kind == "shutdown_request":
        raise Abandon("the ResourceManager asked this AM attempt to shut down")
    elif kind == "rm_error":
        raise Abandon(f"lost the ResourceManager: {event.get('message')}")
    elif kind in ("stopped", "stop_failed"):
        log.debug("event %s", event)
    else:
        log.warning("unknown event %s", event)


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
    am_attempt = bridge.attemptNumber()
    spec = load_spec(Path(SPEC_FILE))
    meta = JobMeta.from_json(json.loads(Path(JOB_META).read_text()))
    log.info("AM for %s attempt %d: %s, %d tasks", meta.app_id, am_attempt, spec.framework, len(spec.tasks()))

    host = os.environ.get("NM_HOST") or socket.getfqdn()
    bind_ip = socket.gethostbyname(host)
    bridge.start(FAST_HEARTBEAT_MS)
    port = BridgePort(bridge, spec)
    holder: dict = {}

    def build_launch(task: Task) -> dict:
        return holder["launcher"].build(task)

    coordinator = Coordinator(spec, port, build_launch)
    store = StateStore(bridge.fs(), meta.staging_dir)
    log_url = log_url_for(os.environ.get("USER") or meta.user)

    def status(trusted: bool) -> dict:
        data = coordinator.status(log_url)
        data.update(app_id=meta.app_id, am_attempt=am_attempt, name=spec.name,
                    snapshot_current=store.current(coordinator))
        return data if trusted else report.public_view(data)

    verifier = Verifier(app_secret)
    coordinator.auth_last_seen = verifier.last_seen
    server = AmHttpServer((bind_ip, 0), coordinator, verifier, status, trusted_addresses=proxy_addresses(bridge),
                          max_connections=2 * len(spec.tasks()) + 64)
    threading.Thread(target=server.serve_forever, name="am-http", daemon=True).start()
    tracking_url = f"http://{host}:{server.port}/"
    holder["launcher"] = TaskLauncher(spec, meta, host, server.port)
    reg = json.loads(bridge.register(host, server.port, tracking_url))
    log.info("registered with the RM; tracking URL %s; max container %s", tracking_url, reg.get("max_capability"))
    coordinator.timeline["am_registered"] = time.time()

    snapshot = store.load() if am_attempt > 1 else None
    if snapshot is not None:
        verifier.restore(snapshot.auth_last_seen)
        adopted = coordinator.adopt(snapshot, reg.get("previous_containers") or [])
        threading.Thread(target=notify_executors, daemon=True,
                         args=(adopted, f"http://{host}:{server.port}", Signer(app_secret, f"am-{am_attempt}"))).start()
    elif am_attempt > 1:
        log.warning("no snapshot from the earlier attempt: starting the job over")
        for container in reg.get("previous_containers") or []:
            port.stop(container["id"])

    stop_requested = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop_requested.set())
    coordinator.start()
    store.start(coordinator)
    try:
        while not coordinator.done:
            if stop_requested.is_set():
                # The NodeManager is stopping this container (application killed, AM over its
                # memory, node going down). Leave the tasks alone: YARN kills them if the
                # application is over, and a next attempt re-adopts them if it is not.
                raise Abandon("the AM container received SIGTERM")
            for event in json.loads(bridge.poll(POLL_MS)):
                dispatch(coordinator, event)
            coordinator.tick()
    except Abandon as exc:
        log.error("ending this AM attempt: %s", exc)
        try:  # leave the next attempt the latest task table, if there is time
            store.stop(coordinator, timeout_s=1.0)
        except Exception:  # noqa: BLE001 - the JVM may already be going away
            pass
        return 1
    store.stop(coordinator)

    final = coordinator.final_status or "FAILED"
    diagnostics = coordinator.diagnostics()
    log.info("job %s\n%s", final, diagnostics)
    # Let a following client read the final task table before the tracking URL goes away.
    server.final_status_served.wait(timeout=spec.client_stop_wait_s)
    bridge.unregister(final, diagnostics[:60000], tracking_url)
    try:
        bridge.fs().delete(meta.staging_dir, True)
    except Exception as exc:  # noqa: BLE001 - cleanup is best effort; the client retries
        log.warning("could not delete the staging dir %s: %s", meta.staging_dir, exc)
    server.shutdown()
    return 0


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger("py4j").setLevel(logging.WARNING)
    try:
        code = run()
    except Py4JError as exc:  # the AM's JVM is gone (killed, or crashed): nothing left to do
        log.error("lost the AM's JVM: %s", str(exc).splitlines()[0])
        code = 1
    except Exception:
        log.exception("the Python AM failed")
        code = 1
    sys.exit(code)
