"""Fences: no two copies of a task ever run at once.

A copy of a task is one executor in one container at one gang attempt. When the AM replaces a
copy that may still be running its task somewhere it cannot be told to stop (its node cut off,
frozen, or its NodeManager unreachable), it fences it: no replacement of that task is given its
spec (so starts its process) until one of these is true:

- the copy's lease has run out: `lease_s` (tony.task.executor.lease-sec) plus a margin since the
  AM last heard from it. Its executor counts the same lease from when it *sent* the request the
  AM last answered, which is no later, and kills the task when it runs out
  (tony_py/executor/lease.py); so by then the copy is dead;
- YARN reports its container ended with a status its NodeManager observed (the process is gone),
  not one the ResourceManager made up for a lost node (-100, -106), which proves nothing about
  the process;
- the copy was never given its spec (it never started the task).

A copy that keeps calling after it was replaced (a healed partition) is told it is superseded;
each call moves its fence on, so the lease then runs from the answer that told it to exit.
A new AM attempt fences every task it does not re-adopt from its own start: the previous attempt
may have started copies its snapshot does not show.

Pure bookkeeping on the AM's clock; the coordinator holds the lock.
"""

from __future__ import annotations

from dataclasses import dataclass

# YARN exit statuses the ResourceManager reports for containers it could not see end: ABORTED
# (also a lost node's) and KILLED_BY_RESOURCEMANAGER.
UNOBSERVED_EXITS = frozenset({-100, -106})
# The executor kills its task within ~0.05 s of its lease's end and the kill takes a moment; this
# covers that, and clocks that tick at slightly different rates on different machines.
MARGIN_S = 2.0


@dataclass
class Fence:
    task: str
    copy: str  # the container id, or "<task> of AM attempt n" for copies the AM cannot name
    until: float  # no replacement of the task starts before this (the AM's clock)
    why: str


class Fences:
    def __init__(self, lease_s: float, margin_s: float = MARGIN_S):
        self.lease_s = lease_s
        self.margin_s = margin_s
        self.active: dict[str, Fence] = {}  # by copy

    def fence(self, task: str, copy: str, last_heard: float, why: str) -> Fence:
        until = last_heard + self.lease_s + self.margin_s
        fence = self.active.get(copy)
        if fence is None or until > fence.until:
            fence = self.active[copy] = Fence(task, copy, until, why)
        return fence

    def heard_from(self, copy: str, now: float) -> None:
        """A fenced copy called (it is alive and was told it is superseded): its lease runs on."""
        fence = self.active.get(copy)
        if fence is not None:
            fence.until = max(fence.until, now + self.lease_s + self.margin_s)

    def ended(self, copy: str, exit_status: int) -> bool:
        """YARN reports the copy's container ended; True if that lifts its fence."""
        if copy in self.active and exit_status not in UNOBSERVED_EXITS:
            del self.active[copy]
            return True
        return False

    def holding(self, tasks, now: float) -> list[Fence]:
        """The fences still holding any of these tasks back (expired ones are dropped)."""
        for copy in [c for c, f in self.active.items() if f.until <= now]:
            del self.active[copy]
        names = set(tasks)
        return [f for f in self.active.values() if f.task in names]
