"""Container request bookkeeping: what was asked of YARN and not granted yet, per job type.

Each job type has its own allocation-request id (and priority), so an allocated container says
which type it is for (TonY matched by priority; both are set, for clusters that do not echo the
id). The book asks only for containers not already on their way: after a restart or an AM
fail-over some requests may still be outstanding, and asking twice would hand back surplus
containers to release.
"""

from __future__ import annotations

from typing import Callable, Iterable

from tony_py.config.spec import JobSpec


class RequestBook:
    def __init__(self, spec: JobSpec, cluster, clock: Callable[[], float]):
        self.spec = spec
        self.cluster = cluster
        self.clock = clock
        self.ids = {t.name: i for i, t in enumerate(spec.types)}
        self.outstanding: dict[str, int] = {}  # containers asked for and not yet allocated
        self.requested_at = clock()  # when the current outstanding requests were made
        self.last_grant_at: float | None = None  # when YARN last granted one of them

    def ask(self, pending: dict[str, int]) -> int:
        """Request what `pending` (PENDING tasks per type) is not already covered by."""
        asked = 0
        for task_type in self.spec.types:
            missing = pending.get(task_type.name, 0) - self.outstanding.get(task_type.name, 0)
            if missing > 0:
                self.cluster.request(self.ids[task_type.name], task_type, missing)
                self.outstanding[task_type.name] = self.outstanding.get(task_type.name, 0) + missing
                asked += missing
        if asked:
            self.requested_at = self.clock()
        return asked

    def granted(self, allocation_request_id, priority) -> str | None:
        """The job type an allocated container is for (None: not ours); counts it as granted."""
        name = next((n for n, rid in self.ids.items() if rid == allocation_request_id), None)
        if name is None:  # clusters that do not echo request ids
            name = next((n for n, rid in self.ids.items() if rid == priority), None)
        if name is not None and self.outstanding.get(name, 0) > 0:
            self.outstanding[name] -= 1
            self.last_grant_at = self.clock()
        return name

    def unmet_for(self, now: float) -> float:
        """How long requests have been outstanding with nothing granted (0 when none is)."""
        if not self.waiting:
            return 0.0
        return now - max(self.requested_at, self.last_grant_at or self.requested_at)

    def cancel(self, types: Iterable[str] | None = None) -> None:
        """Withdraw every outstanding request (of the given types)."""
        for name in list(types if types is not None else self.ids):
            self.cluster.cancel_requests(self.ids[name])
            self.outstanding.pop(name, None)

    @property
    def waiting(self) -> bool:
        return any(self.outstanding.values())
