"""Where a job's time went: waiting for YARN, starting its containers, and tasks that kept the
rest waiting (stragglers, parameter servers at their limit)."""

from __future__ import annotations

import math
import statistics

from tony_py.advice import thresholds as th
from tony_py.advice.model import Finding, JobFacts, Suggestion, TaskFacts


def waiting(facts: JobFacts) -> list[Finding]:
    """In the queue (submitted until the AM started) and for containers (asked until the first
    gang had them all)."""
    total, submitted = facts.total_s, facts.submitted
    am_started, requested = facts.first("AM_STARTED"), facts.first("REQUESTED")
    served = facts.first("SPEC_SERVED") or facts.first("TASK_STARTED") or facts.end
    if total is None or submitted is None or am_started is None:
        return []
    queued = max(0.0, am_started - submitted)
    allocated = [e["ts"] for e in facts.events if e.get("kind") == "ALLOCATED" and served and e["ts"] <= served]
    for_containers = max(0.0, max(allocated) - requested) if allocated and requested is not None else 0.0
    waited = queued + for_containers
    if waited < max(th.WAIT_MIN_S.value, th.WAIT_SHARE.value * total):
        return []
    suggestion = _where_to_wait_less(facts, queued >= for_containers)
    if suggestion is None:
        return []
    return [Finding("waiting", "moderate" if waited >= total / 2 else "low", None,
                    f"the job waited {waited:.0f} s of its {total:.0f} s: {queued:.0f} s in queue {facts.spec.queue} "
                    f"before its AM started, {for_containers:.0f} s for its containers", suggestion)]


def _where_to_wait_less(facts: JobFacts, in_the_queue: bool) -> Suggestion | None:
    """Another queue with room for the whole job now; else, when it waited for containers, the
    placement constraints that narrowed where they could go."""
    needed = sum(t.instances * t.resources.memory_mb for t in facts.spec.types) + facts.spec.am.memory_mb
    roomy = sorted((free, name) for name, free in facts.queues if name != facts.spec.queue and free >= needed)
    if roomy:
        return Suggestion("tony.yarn.queue", roomy[-1][1])
    placed = next((t for t in facts.spec.types if t.placement_spec), None)
    if not in_the_queue and placed is not None:
        return Suggestion(f"tony.{placed.name}.placement-spec", "")
    return None


def startup(facts: JobFacts) -> list[Finding]:
    """Containers slow from their start to their executor's registration: localizing the job's
    files (the venv above all) and starting Python."""
    total = facts.total_s
    delays = []
    for task in {e.get("task") for e in facts.events if e.get("kind") == "LAUNCHED"}:
        launched, registered = facts.first("LAUNCHED", task), facts.first("REGISTERED", task)
        if launched is not None and registered is not None:
            delays.append((registered - launched, task))
    if not delays or total is None:
        return []
    slowest, task = max(delays)
    if slowest < th.LOCALIZATION_MIN_S.value or slowest < th.LOCALIZATION_SHARE.value * total:
        return []
    shipped = any(facts.spec.command_for(t.name).startswith("venv/") for t in facts.spec.types)  # --python_venv
    what = "the venv" if shipped else "the job's Python"
    return [Finding("startup", "moderate", task.split(":")[0],
                    f"{task}'s container took {slowest:.0f} s from its start to its executor's registration "
                    f"(the median of {len(delays)}: {statistics.median(d for d, _ in delays):.0f} s), "
                    f"{slowest / total:.0%} of the job's {total:.0f} s",
                    Suggestion("--python_venv", f"ship {what} byte-compiled (python -m compileall) and without what "
                               "the job does not import: localizing and starting it is what the container waited on",
                               kind="code"))]


def stragglers(facts: JobFacts) -> list[Finding]:
    out = [*_ps_at_their_limit(facts)]
    chief = str(facts.spec.chief())
    chief_task = next((t for t in facts.tasks if t.name == chief), None)
    for tt in facts.spec.types:
        done = [t for t in facts.of_type(tt.name) if t.state == "SUCCEEDED" and t.ran_s is not None and t.tracked]
        if len(done) < 2:
            continue
        slow = max(done, key=lambda t: t.ran_s)
        others = statistics.median(t.ran_s for t in done if t is not slow)
        if slow.ran_s - others < th.STRAGGLER_MIN_S.value or slow.ran_s < th.STRAGGLER_RATIO.value * others:
            continue
        evidence = (f"{slow.name} took {slow.ran_s:.0f} s, the other {tt.name} tasks {others:.0f} s (median): the "
                    f"job waited {slow.ran_s - others:.0f} s for it")
        suggestion = _straggler_fix(facts, tt, slow, chief_task)
        if suggestion is not None:
            out.append(Finding("stragglers", "moderate", tt.name, evidence, suggestion))
    return out


def _straggler_fix(facts, tt, slow: TaskFacts, chief: TaskFacts | None) -> Suggestion | None:
    """Its vcores, where it was bound by them; else stopping stragglers after the chief, where
    it outlived the chief and TonY's timeout for that is longer than the others needed (every
    tracked task of every type: the timeout stops them all)."""
    if slow.metrics.get("AVG_CPU_UTILIZATION", 0) / 100 >= th.CPU_CAPPED.value * tt.resources.vcores:
        return Suggestion(f"tony.{tt.name}.vcores", str(tt.resources.vcores + 1))
    if chief is None or chief is slow or chief.finished_at is None or slow.finished_at <= chief.finished_at:
        return None
    done = [t for t in facts.tasks if t.state == "SUCCEEDED" and t.tracked and t.finished_at is not None]
    after = max([0.0] + [t.finished_at - chief.finished_at for t in done if t is not slow and t is not chief])
    value_ms = int(math.ceil((after + th.AFTER_CHIEF_MARGIN_S.value) / 10) * 10_000)
    if value_ms >= facts.spec.after_chief_timeout_ms >= 0 or slow.finished_at - chief.finished_at <= value_ms / 1000:
        return None
    return Suggestion("tony.application.after-chief-timeout-ms", str(value_ms))


def _ps_at_their_limit(facts: JobFacts) -> list[Finding]:
    types = {t.name: t for t in facts.spec.types}
    ps, workers = types.get("ps"), types.get("worker")
    if ps is None or workers is None:
        return []
    busy = [t.metrics.get("AVG_CPU_UTILIZATION", 0) / 100 / ps.resources.vcores for t in facts.of_type("ps")]
    idle = [t.metrics.get("AVG_CPU_UTILIZATION", 0) / 100 / workers.resources.vcores for t in facts.of_type("worker")
            if "AVG_CPU_UTILIZATION" in t.metrics]
    if not busy or not idle or min(busy) < th.CPU_CAPPED.value or max(idle) >= th.PS_BUSY_WORKERS_IDLE.value:
        return []
    return [Finding("stragglers", "moderate", "ps",
                    f"the {ps.instances} ps task(s) used {min(busy):.0%} or more of their {ps.resources.vcores} vcores "
                    f"while the workers used at most {max(idle):.0%} of theirs: the workers waited for the ps",
                    Suggestion("tony.ps.instances", str(ps.instances + 1)))]
