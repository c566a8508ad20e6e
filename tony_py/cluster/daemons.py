"""The processes a launcher started on this machine (daemons, the KDC): which live process a
recorded pid still is, and stopping several at once."""

from __future__ import annotations

from dataclasses import dataclass

import psutil


@dataclass
class DaemonState:
    name: str
    pid: int
    create_time: float
    log: str

    def process(self) -> psutil.Process | None:
        """The live process this entry describes, or None (gone, or pid reused)."""
        try:
            proc = psutil.Process(self.pid)
            if abs(proc.create_time() - self.create_time) > 1.0:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
            return proc
        except psutil.Error:
            return None


def kill_all(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)
