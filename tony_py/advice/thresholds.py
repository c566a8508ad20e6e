"""Every threshold the heuristics use, with its reason: the one table docs/advice.md shows."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Threshold:
    value: float
    why: str


# ---- memory ---------------------------------------------------------------------------------------
# Dr. Elephant's TonY memory heuristic: peak use over the request; the lower, the worse.
MEMORY_RATIO_SEVERITY = ((0.5, "critical"), (0.6, "severe"), (0.7, "moderate"), (0.8, "low"))
MEMORY_RATIO_WHY = "Dr. Elephant's TonY memory heuristic: a type's peak over its request at 0.8/0.7/0.6/0.5"
MEMORY_GRACE_ALLOCATIONS = Threshold(
    2, "no finding while the unused memory is under 2 of YARN's allocation increments (Dr. Elephant's grace): "
       "YARN rounds every container up to one anyway")
MEMORY_HEADROOM = Threshold(
    1.25, "suggest the peak (the task's process tree and its executor) x 1.25, rounded up to YARN's increment: "
          "room for a larger batch or a longer run without risking YARN's kill")
MEMORY_KILL_GROWTH = Threshold(
    1.5, "a task YARN killed for memory gets 1.5x its request (or its measured peak x 1.25 if larger): "
         "its real peak is unknown, only that it was above the limit")
MIN_SAMPLES = Threshold(
    2, "a task is judged on its metrics only once it ran at least 2 metrics intervals "
       "(tony.task.metrics-interval-ms): fewer samples can miss its peak")

# ---- vcores ---------------------------------------------------------------------------------------
VCORE_JITTER = Threshold(
    0.1, "a task's busiest interval may read a little over whole cores (threads, its children): 0.1 core "
         "of slack before rounding its need up")

# ---- GPUs -----------------------------------------------------------------------------------------
GPU_UNTOUCHED_UTILIZATION = Threshold(0, "no kernel ran in any sample: the GPUs were never used")
GPU_UNTOUCHED_MEMORY_MB = Threshold(
    256, "under 256 MB of device memory: less than a CUDA context alone takes (300 MB and more), so nothing "
         "of the job lived there")
GPU_IDLE_UTILIZATION = Threshold(
    20, "a type's GPUs busy under 20 % on average: with 2 or more per task, fewer would do the same work")
GPU_TARGET_UTILIZATION = Threshold(50, "fewer GPUs are suggested so that the rest would be about 50 % busy")

# ---- waiting and start-up -------------------------------------------------------------------------
WAIT_SHARE = Threshold(0.25, "waiting (queue, then containers) over 25 % of the job's time from submit to end")
WAIT_MIN_S = Threshold(60, "and over 60 s: shorter waits are a busy cluster's normal")
LOCALIZATION_MIN_S = Threshold(
    30, "containers that took over 30 s from their start to their executor's registration: "
        "localizing the job's files (the venv above all) and starting Python")
LOCALIZATION_SHARE = Threshold(0.2, "and over 20 % of the job's time")

# ---- stragglers and skew --------------------------------------------------------------------------
STRAGGLER_MIN_S = Threshold(30, "a task that ran 30 s or more longer than the median of the others of its type")
STRAGGLER_RATIO = Threshold(1.5, "and took 1.5x the median time or more")
CPU_CAPPED = Threshold(0.9, "a task using 90 % or more of its vcores on average is bound by them")
PS_BUSY_WORKERS_IDLE = Threshold(
    0.5, "parameter servers bound by their vcores while workers use under 50 % of theirs: the workers "
         "wait for the ps")
AFTER_CHIEF_MARGIN_S = Threshold(30, "stop workers 30 s after the chief, beyond what the others needed")

# ---- failures -------------------------------------------------------------------------------------
FLAPPING_NODE_FAILURES = Threshold(
    2, "two or more failures on one node (other than the user's own exit codes) in one job: the node, "
       "not the code")
TIMEOUT_SLACK = Threshold(
    10, "tony.application.timeout over 10x what the job took: a hang is caught only that late")
TIMEOUT_SUGGESTED_FACTOR = Threshold(3, "suggest 3x the job's time, rounded up to whole minutes")


def table() -> list[tuple[str, str, str]]:
    """(name, value, why) of every threshold, for docs/advice.md's table."""
    rows = [("MEMORY_RATIO_SEVERITY", ", ".join(f"{r} {s}" for r, s in MEMORY_RATIO_SEVERITY), MEMORY_RATIO_WHY)]
    for name, value in globals().items():
        if isinstance(value, Threshold):
            rows.append((name, f"{value.value:g}", value.why))
    return rows
