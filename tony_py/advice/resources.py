"""What each task type asked for against what its tasks used: memory, vcores, GPUs."""

from __future__ import annotations

import math

from tony_py.advice import thresholds as th
from tony_py.advice.model import Finding, JobFacts, Suggestion, TaskFacts
from tony_py.config.ray_limits import RAY_DAEMONS_MB, ray_min_memory_mb
from tony_py.config.spec import TaskType
from tony_py.config.traits import traits
from tony_py.job.yarn_exits import MEMORY_EXITS

MIB = 1 << 20


def memory_value(mb: int) -> str:
    """A memory value as a user writes it: 2g, 1536m."""
    return f"{mb // 1024}g" if mb % 1024 == 0 else f"{mb}m"


def round_up(mb: float, increment: int) -> int:
    """Up to YARN's allocation increment, as the scheduler would grant it."""
    increment = max(1, increment)
    return max(increment, math.ceil(mb / increment) * increment)


def judged(facts: JobFacts, task: TaskFacts) -> bool:
    """Ran long enough for its metrics to have caught its peak (MIN_SAMPLES intervals)."""
    end = task.finished_at if task.finished_at is not None else facts.now
    if task.started_at is None or end is None:
        return False
    return end - task.started_at >= th.MIN_SAMPLES.value * facts.spec.metrics_interval_ms / 1000


def hours(facts: JobFacts, task: TaskFacts) -> float:
    end = task.finished_at if task.finished_at is not None else facts.now
    return max(0.0, (end or 0) - (task.started_at or end or 0)) / 3600


def container_peak_mb(task: TaskFacts) -> float | None:
    """The task's process tree at its peak plus its executor: what YARN's memory check counts."""
    tree = task.metrics.get("MAX_MEMORY_BYTES")
    if tree is None:
        return None
    return (tree + (task.metrics.get("executor_max_rss_bytes") or 0)) / MIB


def sized_types(facts: JobFacts) -> list[TaskType]:
    """The task types that their own tony.<type>.* keys size: not a single-node job's task (it
    runs in the AM's container) nor a type the framework adds (Horovod's driver: TonY-py sizes it,
    tony.driver.* is refused)."""
    spec = facts.spec
    if spec.single_node:
        return []
    return [tt for tt in spec.types if tt.name != traits(spec.framework).added_type]


def least_memory_mb(facts: JobFacts, type_name: str) -> int:
    """The smallest request the next submit accepts for a type (a Ray node's daemons and store)."""
    return ray_min_memory_mb(type_name) if facts.spec.framework == "ray" and type_name in RAY_DAEMONS_MB else 0


def memory(facts: JobFacts) -> list[Finding]:
    out = []
    for tt in sized_types(facts):
        asked = tt.resources.memory_mb
        killed = [f for f in facts.failures if f.get("task", "").split(":")[0] == tt.name
                  and f.get("exit_code") in MEMORY_EXITS]
        # every measured peak counts (a short task's too: never suggest below what one used), but
        # a type is judged only once one of its tasks ran long enough for its peak to be caught
        peaks = [(p, t) for t in facts.of_type(tt.name) if (p := container_peak_mb(t)) is not None]
        if killed:
            out.append(_killed(facts, tt.name, asked, killed, peaks))
            continue
        if not any(judged(facts, t) for _, t in peaks):
            continue
        peak, top = max(peaks, key=lambda pt: pt[0])
        if asked - peak < th.MEMORY_GRACE_ALLOCATIONS.value * facts.min_allocation_mb:
            continue
        severity = next((s for ratio, s in th.MEMORY_RATIO_SEVERITY if peak / asked <= ratio), None)
        value = round_up(max(peak * th.MEMORY_HEADROOM.value, least_memory_mb(facts, tt.name)),
                         facts.min_allocation_mb)
        if severity is None or value >= asked:
            continue
        waste = sum((asked - p) / 1024 * hours(facts, t) for p, t in peaks)
        out.append(Finding(
            "memory", severity, tt.name,
            f"{tt.name} asked for {asked} MB per task and used at most {peak:.0f} MB ({top.name}: its process tree "
            f"and executor at their peak), {peak / asked:.0%} of it",
            Suggestion(f"tony.{tt.name}.memory", memory_value(value)), waste, "GB-hours"))
    return out


def _killed(facts: JobFacts, type_name: str, asked: int, killed: list[dict], peaks: list) -> Finding:
    peak = max((p for p, _ in peaks), default=0.0)
    value = round_up(max(asked * th.MEMORY_KILL_GROWTH.value, peak * th.MEMORY_HEADROOM.value),
                     facts.min_allocation_mb)
    names = ", ".join(sorted({f["task"] for f in killed}))
    seen = f"; the last peak measured before it: {peak:.0f} MB" if peak else ""
    evidence = f"YARN killed {names} for exceeding its {asked} MB ({len(killed)} time(s)){seen}"
    largest = facts.max_allocation_mb
    if largest is not None and value > largest:
        if asked >= largest:  # no request can grow: the task must hold less
            return Finding("memory", "critical", type_name, f"{evidence}; the cluster's largest container is "
                           f"{largest} MB (yarn.scheduler.maximum-allocation-mb)",
                           Suggestion(type_name, "hold less: a smaller batch or model shard per task, or more tasks",
                                      kind="code"))
        value, evidence = largest, f"{evidence}; capped at the cluster's largest container"
    return Finding("memory", "critical", type_name, evidence, Suggestion(f"tony.{type_name}.memory", memory_value(value)))


def vcores(facts: JobFacts) -> list[Finding]:
    out = []
    for tt in sized_types(facts):
        asked = tt.resources.vcores
        used = [(t.metrics["MAX_CPU_UTILIZATION"] / 100, t.metrics.get("AVG_CPU_UTILIZATION", 0) / 100, t)
                for t in facts.of_type(tt.name) if judged(facts, t) and "MAX_CPU_UTILIZATION" in t.metrics]
        if asked < 2 or not used:
            continue
        peak, avg, top = max(used, key=lambda u: u[0])
        need = max(1, math.ceil(peak - th.VCORE_JITTER.value))
        if need >= asked:
            continue
        unused = 1 - peak / asked
        severity = "severe" if unused >= 0.75 else "moderate" if unused >= 0.5 else "low"
        waste = sum((asked - p) * hours(facts, t) for p, _, t in used)
        out.append(Finding(
            "vcores", severity, tt.name,
            f"{tt.name} asked for {asked} vcores per task and used at most {peak:.2f} cores ({top.name}; "
            f"{avg:.2f} on average)", Suggestion(f"tony.{tt.name}.vcores", str(need)), waste, "vcore-hours"))
    return out


def gpu_memory_used_mb(task: TaskFacts) -> float | None:
    """The most device memory the task's GPUs held (MB), from the share and the device's size."""
    share, total = task.metrics.get("MAX_GPU_FB_MEMORY_USAGE"), task.metrics.get("gpu_memory_total_bytes")
    if share is None or not total:
        return None
    return share / 100 * total / MIB


def gpus(facts: JobFacts) -> list[Finding]:
    out = []
    for tt in sized_types(facts):
        asked = tt.resources.gpus
        # a device that reports no utilization ([N/A]) says nothing about whether it was used
        seen = [t for t in facts.of_type(tt.name) if judged(facts, t) and "MAX_GPU_UTILIZATION" in t.metrics]
        if not asked or not seen:
            continue
        util = max(t.metrics["MAX_GPU_UTILIZATION"] for t in seen)
        held = [gpu_memory_used_mb(t) for t in seen]
        memory_mb = max((m for m in held if m is not None), default=None)
        average = max(t.metrics.get("AVG_GPU_UTILIZATION", 0) for t in seen)
        gpu_hours = sum(asked * hours(facts, t) for t in seen)
        if util <= th.GPU_UNTOUCHED_UTILIZATION.value and memory_mb is not None \
                and memory_mb < th.GPU_UNTOUCHED_MEMORY_MB.value:
            out.append(Finding(
                "gpus", "severe", tt.name,
                f"{tt.name} asked for {asked} GPU(s) per task and never used them: {util:g} % utilization and "
                f"{memory_mb:.0f} MB of their memory at most", Suggestion(f"tony.{tt.name}.gpus", "0"), gpu_hours,
                "GPU-hours"))
        elif asked >= 2 and average < th.GPU_IDLE_UTILIZATION.value:
            # torchrun splits a task's GPUs evenly between its processes: keep a multiple of them
            step = tt.nproc_per_node
            value = step * max(1, math.ceil(asked * average / th.GPU_TARGET_UTILIZATION.value / step))
            if value < asked:
                out.append(Finding(
                    "gpus", "moderate", tt.name,
                    f"{tt.name}'s {asked} GPUs per task were {average:g} % busy on average (at most {util:g} %)",
                    Suggestion(f"tony.{tt.name}.gpus", str(value)), gpu_hours * (1 - value / asked), "GPU-hours"))
    return out
