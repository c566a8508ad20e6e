"""The cluster events that reach the AM's job loop (runtime.py): one frozen, checked dataclass per
kind, whichever port runs the containers. The JVM relays YARN's callbacks as JSON
(AmBridge.java's `emit` calls; yarn.py's pump puts the decoded objects in the queue), and
local.py builds the same objects from these classes for processes on this machine.

On the wire an event is an object: its kind under "type", the JVM's clock under "time_ms" and
its fields by name. `parse_event` reads one into its class once, where the job loop takes it
from the queue: a missing, unknown or ill-typed key is refused with the kind and the field named
(the two sides ship together, so a mismatch is a bug to see at once, not half-read); a kind
it does not know gives None, which the loop logs and skips. tests/unit/test_cluster_events.py
checks these classes against the keys AmBridge.java puts into each event.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, ClassVar

from tony_py.config.model import Checked, ModelError

EVENTS: dict[str, type[ClusterEvent]] = {}  # wire name -> class, filled as the classes are defined


class EventError(ModelError):
    """An event that does not match its kind's schema; the message names the kind and the field."""


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, kw_only=True)
class ClusterEvent(Checked):
    KIND: ClassVar[str] = ""
    time_ms: int = field(default_factory=_now_ms)  # (the JVM stamps its own; local.py's are stamped here)

    def __init_subclass__(cls, kind: str, **kwargs):
        super().__init_subclass__(**kwargs)
        if kind in EVENTS:
            raise TypeError(f"two cluster events named {kind!r}: {EVENTS[kind].__name__} and {cls.__name__}")
        cls.KIND = kind
        EVENTS[kind] = cls

    def wire(self) -> dict:
        """The event as the JVM sends it (a queue's item; what `parse` reads back)."""
        return {"type": self.KIND, **self.to_dict()}

    @classmethod
    def parse(cls, data: Any) -> ClusterEvent:
        if not isinstance(data, dict):
            raise EventError(f"cluster event {cls.KIND!r}: expected an object, got {type(data).__name__}")
        body = dict(data)
        kind = body.pop("type", None)
        if kind != cls.KIND:
            raise EventError(f"cluster event {cls.KIND!r}: its type is {kind!r}")
        try:
            return cls.from_dict(body, cls.KIND)
        except ModelError as exc:
            raise EventError(f"cluster event {cls.KIND!r} does not match its schema: {exc}") from None


def parse_event(data: Any) -> ClusterEvent | None:
    """The event's dataclass, checked; None for a kind no class has."""
    kind = data.get("type") if isinstance(data, dict) else None
    if not isinstance(kind, str):
        raise EventError(f"a cluster event must be an object with a string 'type', got {str(data)[:200]}")
    cls = EVENTS.get(kind)
    return None if cls is None else cls.parse(data)


# ---- the parts of events ------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class GrantedContainer(Checked):
    """A container as the RM describes it (AmBridge.describe); the coordinator reads its dict."""

    id: str
    node_id: str
    host: str
    node_http: str | None  # (Container.from_event reads a missing one as "")
    resource: dict[str, int]  # YARN's resource names: memory-mb, vcores, yarn.io/gpu, …
    allocation_request_id: int
    priority: int


@dataclass(frozen=True, kw_only=True)
class NodeChange(Checked):
    node_id: str
    state: str  # YARN's NodeState: RUNNING, LOST, UNHEALTHY, DECOMMISSIONED, …


# ---- the events: the RM's (AMRMClientAsync) ----------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Allocated(ClusterEvent, kind="allocated"):
    container: GrantedContainer


@dataclass(frozen=True, kw_only=True)
class Completed(ClusterEvent, kind="completed"):
    container_id: str
    exit_status: int
    state: str  # YARN's ContainerState (COMPLETE)
    diagnostics: str | None


@dataclass(frozen=True, kw_only=True)
class PreviousContainers(ClusterEvent, kind="previous_containers"):
    """Containers of earlier attempts the RM names only after registration."""

    containers: tuple[GrantedContainer, ...]


@dataclass(frozen=True, kw_only=True)
class Preemption(ClusterEvent, kind="preemption"):
    containers: tuple[str, ...]  # container ids
    wait_ms: int  # how long the scheduler waits before the kill, as the cluster configures it


@dataclass(frozen=True, kw_only=True)
class NodesUpdated(ClusterEvent, kind="nodes_updated"):
    nodes: tuple[NodeChange, ...]


@dataclass(frozen=True, kw_only=True)
class RequestsRejected(ClusterEvent, kind="requests_rejected"):
    allocation_request_id: int
    reason: str


@dataclass(frozen=True, kw_only=True)
class RmBack(ClusterEvent, kind="rm_back"):
    """The RM answered again after an outage this attempt rode through."""

    silent_ms: int


@dataclass(frozen=True, kw_only=True)
class ShutdownRequest(ClusterEvent, kind="shutdown_request"):
    pass


@dataclass(frozen=True, kw_only=True)
class RmError(ClusterEvent, kind="rm_error"):
    """AMRMClientAsync gave up (or the AM's JVM is gone: yarn.py's pump)."""

    message: str


# ---- the events: the NodeManagers' (NMClientAsync) ----------------------------------------------
@dataclass(frozen=True, kw_only=True)
class Started(ClusterEvent, kind="started"):
    container_id: str


@dataclass(frozen=True, kw_only=True)
class StartFailed(ClusterEvent, kind="start_failed"):
    container_id: str
    message: str


@dataclass(frozen=True, kw_only=True)
class Stopped(ClusterEvent, kind="stopped"):
    container_id: str


@dataclass(frozen=True, kw_only=True)
class StopFailed(ClusterEvent, kind="stop_failed"):
    container_id: str
    message: str
