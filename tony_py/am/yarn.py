"""The AM's side of YARN and HDFS, through the AM's JVM (io.tonypy.am.AmBridge over Py4J): the
coordinator's ClusterPort, the pump that carries RM/NM events into the AM's queue, the web
proxy's addresses, and the fail-over snapshot in the staging dir.
"""

from __future__ import annotations

import json
import logging
import queue
import socket
import threading

from py4j.protocol import Py4JError

from tony_py.am.cluster_events import RmError
from tony_py.am.core.coordinator import Coordinator
from tony_py.am.core.failover import AmSnapshot
from tony_py.config.spec import JobSpec, TaskType

log = logging.getLogger("tony.am")

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

    # YARN's blacklist holds resource names (host or rack names), not node ids (host:port): a
    # node id there matches nothing.
    def blacklist(self, node_id: str) -> None:
        self.bridge.updateBlacklist([node_id.rsplit(":", 1)[0]], [])

    def unblacklist(self, node_id: str) -> None:
        self.bridge.updateBlacklist([], [node_id.rsplit(":", 1)[0]])

    def node_count(self) -> int:
        return self.bridge.clusterNodeCount()


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
    """RM/NM events from the JVM into the AM's queue (its own thread: the loop never blocks on the
    JVM), as decoded from its JSON: the loop checks each against cluster_events.py."""
    while not stop.is_set():
        try:
            for event in json.loads(bridge.poll(POLL_MS)):
                events.put(event)
        except Py4JError as exc:
            if not stop.is_set():
                events.put(RmError(message=f"the AM's JVM is gone: {str(exc).splitlines()[0]}").wire())
            return
