"""AM fail-over: the snapshot one AM attempt leaves, and the plan by which the next takes over.

The snapshot is a checked dataclass (tony_py/config/model.py): written as JSON to the staging
dir, read back by the next attempt, refused whole if it does not match. `plan_adoption` is a
pure function of the snapshot and the containers YARN kept; the coordinator applies the plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tony_py.am.core.policy import Action
from tony_py.job.records import Container, Failure, TaskState
from tony_py.config.model import Checked, ModelError

SNAPSHOT_VERSION = 2
# A task in one of these states with no control endpoint: its executor never registered.
_UNREGISTERED = (TaskState.ALLOCATED, TaskState.LAUNCHED)


@dataclass
class TaskRecord(Checked):
    """What a later AM attempt needs to know about one task."""

    state: TaskState
    attempt: int
    container: Container | None
    last_container: Container | None
    address: str | None
    tb_port: int | None
    control_url: str | None
    exit_code: int | None
    signal: str | None
    failure: Failure | None
    released: bool
    tracked: bool
    gpus: list[str]


@dataclass
class Verdict(Checked):
    status: str
    action: Action
    message: str

    def validate(self) -> None:
        if self.status not in ("SUCCEEDED", "FAILED", "KILLED"):
            raise ModelError(f"verdict status {self.status!r}")


@dataclass
class AmSnapshot(Checked):
    version: int
    state: str
    attempt: int
    restarts_used: int
    cluster_view: dict[str, list[str]] | None
    started_at: float
    chief_done_at: float | None
    tasks: dict[str, TaskRecord]
    failures: list[Failure]
    node_failures: dict[str, int]
    blacklisted: list[str]
    verdict: Verdict | None
    stage: int = 0
    callbacks: dict[str, dict] = field(default_factory=dict)
    tensorboard_url: str | None = None
    auth_last_seen: dict[str, int] = field(default_factory=dict)  # so old requests stay refused
    infra_restarts_used: int = 0
    preemptions: int = 0

    def validate(self) -> None:
        if self.version != SNAPSHOT_VERSION:
            raise ModelError(f"snapshot version {self.version}, expected {SNAPSHOT_VERSION}")
        if self.attempt < 0 or self.restarts_used < 0:
            raise ModelError("negative attempt or restart count")


@dataclass
class AdoptionPlan:
    """Per task name, what the new AM attempt does with it."""

    readopt: list[str] = field(default_factory=list)  # executor alive and registered: keep it running
    replace: list[str] = field(default_factory=list)  # container alive, executor never registered: stop, re-request
    lost: list[str] = field(default_factory=list)  # its container ended while no AM was running
    finished: list[str] = field(default_factory=list)  # was already over
    # had no container yet, or one that never registered and that YARN did not keep: request one
    pending: list[str] = field(default_factory=list)
    strangers: list[str] = field(default_factory=list)  # containers YARN kept that the snapshot does not know


def plan_adoption(snapshot: AmSnapshot, live_container_ids: set[str]) -> AdoptionPlan:
    plan = AdoptionPlan()
    known = set()
    for name, record in snapshot.tasks.items():
        container = record.container
        if container is not None:
            known.add(container.id)
        if container is not None and container.id in live_container_ids:
            (plan.readopt if record.control_url else plan.replace).append(name)
        elif record.state.finished:
            plan.finished.append(name)
        elif container is not None and not (record.state in _UNREGISTERED and not record.control_url):
            plan.lost.append(name)
        else:
            # No container, or one whose executor had not registered (as far as the snapshot
            # knows) and that YARN did not keep: YARN keeps only containers the RM has seen
            # running, so the attempt's end took it, not a fault. Asked for again at no cost, as
            # when YARN kept it (a `replace`).
            plan.pending.append(name)
    plan.strangers = sorted(live_container_ids - known)
    return plan
