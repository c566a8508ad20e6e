"""What the heuristics read (JobFacts) and what they say (Finding)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from tony_py.config.spec import JobSpec

SEVERITIES = ("critical", "severe", "moderate", "low")  # most pressing first
# What an hour of each costs, relative to a vcore-hour (the ratios of cloud list prices: a GPU
# about 10 vcores, a vcore about 7.5 GB of memory): only to rank findings of one severity.
COST_PER_HOUR = {"GPU-hours": 10.0, "vcore-hours": 1.0, "GB-hours": 1 / 7.5}


@dataclass(frozen=True)
class Suggestion:
    key: str  # a config key (`--conf key=value`), or, for `kind` code, what to change in the task's code
    value: str
    kind: str = "conf"  # conf: pasteable, and --write applies it | code: the task's own code

    def flag(self) -> str:
        return f"--conf {self.key}={self.value}" if self.kind == "conf" else f"{self.key}: {self.value}"


@dataclass(frozen=True)
class Finding:
    heuristic: str  # memory | vcores | gpus | waiting | startup | stragglers | failures
    severity: str  # one of SEVERITIES
    task_type: str | None
    evidence: str  # what was measured, in numbers
    suggestion: Suggestion
    waste: float = 0.0  # what was asked for and not used, in waste_unit
    waste_unit: str = ""  # a key of COST_PER_HOUR, or "" (time, not resources)

    @property
    def cost(self) -> float:
        return self.waste * COST_PER_HOUR.get(self.waste_unit, 0.0)

    def to_dict(self) -> dict:
        return {"heuristic": self.heuristic, "severity": self.severity, "task_type": self.task_type,
                "evidence": self.evidence, "waste": round(self.waste, 3), "waste_unit": self.waste_unit,
                "suggestion": {"key": self.suggestion.key, "value": self.suggestion.value,
                               "kind": self.suggestion.kind}}

    @classmethod
    def from_dict(cls, d: dict) -> "Finding":
        s = d["suggestion"]
        return cls(d["heuristic"], d["severity"], d.get("task_type"), d["evidence"],
                   Suggestion(s["key"], str(s["value"]), s.get("kind", "conf")), float(d.get("waste") or 0.0),
                   d.get("waste_unit") or "")


@dataclass(frozen=True)
class TaskFacts:
    name: str
    type: str
    state: str
    tracked: bool = True
    host: str | None = None
    started_at: float | None = None
    finished_at: float | None = None
    exit_code: int | None = None
    signal: str | None = None
    metrics: dict = field(default_factory=dict)

    @property
    def ran_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return max(0.0, self.finished_at - self.started_at)


@dataclass(frozen=True)
class JobFacts:
    """A job as the heuristics see it, whether it is over (history) or running (the AM)."""

    app_id: str
    spec: JobSpec
    status: str  # SUCCEEDED | FAILED | KILLED | RUNNING
    tasks: tuple[TaskFacts, ...]
    failures: tuple[dict, ...] = ()  # Failure.to_dict()s, in order
    events: tuple[dict, ...] = ()  # the AM's events (kind, ts, task, …)
    submitted_at: float | None = None
    finished_at: float | None = None  # None while it runs
    now: float | None = None  # for a running job: when it was looked at
    restarts_used: int = 0
    infra_restarts_used: int = 0
    min_allocation_mb: int = 1024  # YARN's allocation increment (yarn.scheduler.minimum-allocation-mb)
    max_allocation_mb: int | None = None  # its largest container, where known (yarn.scheduler.maximum-allocation-mb)
    queues: tuple[tuple[str, int], ...] = ()  # (queue, MB free now), where the client could ask the RM

    def of_type(self, name: str) -> list[TaskFacts]:
        return [t for t in self.tasks if t.type == name]

    @property
    def end(self) -> float | None:
        return self.finished_at if self.finished_at is not None else self.now

    @property
    def submitted(self) -> float | None:
        return self.submitted_at if self.submitted_at is not None else self.first("SUBMITTED")

    @property
    def total_s(self) -> float | None:
        """From its submit to its end (or now, while it runs)."""
        start, end = self.submitted, self.end
        return end - start if start is not None and end is not None else None

    def first(self, kind: str, task: str | None = None) -> float | None:
        """When the first event of this kind (for this task) happened."""
        return self._firsts.get((kind, task))

    @cached_property
    def _firsts(self) -> dict[tuple[str, str | None], float]:
        """(kind, task or None) -> the first such event's time, in one pass: a heuristic asks it for
        every task, and a job of thousands has several events each."""
        out: dict[tuple[str, str | None], float] = {}
        for e in self.events:
            kind = e.get("kind")
            out.setdefault((kind, None), e["ts"])
            if e.get("task") is not None:
                out.setdefault((kind, e["task"]), e["ts"])
        return out
