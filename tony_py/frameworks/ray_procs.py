"""The processes of a Ray node in a TonY-py task (ray_node.py): the node runner is a child
subreaper and kills whatever is still below it once the node stopped; `ray start` dies with the
runner. Standard library only."""

from __future__ import annotations

import ctypes
import os
import signal
import time

PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
try:  # resolved here, in the parent: loading a library between fork and exec is not safe
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - not glibc Linux
    _prctl = None


def become_subreaper() -> bool:
    """Ray's processes that lose their parent (its agents outlive a killed raylet) are
    re-parented to this process rather than to init, so Node.stop still finds them."""
    return _prctl is not None and _prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def descendants(root: int) -> list[int]:
    """Every process below root (by /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_descendants(within_s: float = 1.5) -> int:
    """SIGKILL whatever runs below this process, again until nothing is left (a dying raylet may
    still fork a worker, which is then re-parented here), and reap it; how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + within_s
    while True:
        found = [pid for pid in descendants(os.getpid()) if pid not in killed]
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed.update(found)
        try:
            while os.waitpid(-1, os.WNOHANG) != (0, 0):
                pass
        except ChildProcessError:
            pass
        if not descendants(os.getpid()) or time.monotonic() > deadline:
            return len(killed)
        time.sleep(0.05)


def dies_with(parent: int):
    """For `ray start --block`: it dies when this process dies, even by SIGKILL, and Ray's own
    processes die with it (Ray ties them to it). The executor stops the task's process group,
    but the NodeManager kills the executor 250 ms after its SIGTERM, which on a loaded node can
    come first: the runner then dies of its parent-death signal alone, and without this `ray
    start` and its node outlive the job (CI found a `ray start --block` left behind)."""
    def setup() -> None:  # in the child, between fork and exec
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # this process died before the request was armed
            os._exit(1)

    return setup
