"""Start, watch and stop the user's process, without leaving orphans.

The user command runs as `bash -c <command>` in its own process group (so the executor can
signal everything it started at once), with PR_SET_PDEATHSIG so the kernel kills it if the
executor itself dies, and with stdout/stderr in their own files in the container's log dir.
"""

from __future__ import annotations

import ctypes
import functools
import os
import signal
import subprocess
import time
from pathlib import Path



@functools.cache
def load_psutil():
    """psutil, imported on first use: after the user process started, off every executor's
    start (~20 ms each, and a 16-worker job starts 16 at once). None where it was not shipped
    (the job then reports fewer metrics and finds strays only by process group)."""
    try:
        import psutil
    except ImportError:  # pragma: no cover - exercised on nodes without psutil
        return None
    return psutil

_PR_SET_PDEATHSIG = 1
try:  # resolved here, in the parent: loading a library between fork and exec is not safe
    _prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):  # pragma: no cover - not glibc Linux
    _prctl = None


def _child_setup(parent: int):
    def setup() -> None:  # runs in the child between fork and exec
        os.setpgid(0, 0)
        if _prctl is not None:
            _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the executor died before PDEATHSIG was armed
            os._exit(1)

    return setup


class UserProcess:
    def __init__(self, command: str, env: dict[str, str], cwd: str, stdout: Path, stderr: Path):
        self._out = open(stdout, "ab")
        self._err = open(stderr, "ab")
        try:
            self.popen = subprocess.Popen(
                ["bash", "-c", command],
                env=env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=self._out,
                stderr=self._err,
                preexec_fn=_child_setup(os.getpid()),
                close_fds=True,
            )
        except BaseException:
            self.close()
            raise
        self.pid = self.popen.pid

    def poll(self, timeout: float) -> int | None:
        try:
            return self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def alive(self) -> bool:
        """The command or anything left in its process group is still running."""
        return self.popen.poll() is None or _group_alive(self.pid)

    def _descendants(self) -> list:
        psutil = load_psutil()
        if psutil is None:
            return []
        try:
            return psutil.Process(self.pid).children(recursive=True)
        except psutil.Error:
            return []

    def kill_now(self) -> None:
        """SIGKILL the process group (and strays that left it) at once, from any thread, without
        waiting: fencing (heartbeats.py) may not let the task run a moment longer. kill_group,
        later, reaps and tidies up."""
        strays = self._descendants()  # before the group dies and its children are reparented
        try:
            os.killpg(self.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for proc in strays:
            try:
                proc.kill()
            except Exception:  # noqa: BLE001 - already gone
                pass

    def terminate_group(self) -> None:
        """SIGTERM the process group and return: the task decides what to do before it ends."""
        try:
            os.killpg(self.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            pass

    def _strays(self) -> list:
        """The descendants that left the process group (setsid, setpgid): killpg misses them."""
        strays = []
        for proc in self._descendants():
            try:
                if os.getpgid(proc.pid) != self.pid:
                    strays.append(proc)
            except OSError:  # already gone
                pass
        return strays

    def kill_group(self, grace_s: float = 5.0) -> None:
        """SIGTERM the whole process group, then the strays that left it; SIGKILL both after grace_s.
        The group's signal goes first: the NodeManager SIGKILLs this executor 250 ms after its
        SIGTERM, which a scan of the process table on a loaded node can outlast, and the user
        process's PDEATHSIG reaches it alone, not the rest of its group. (A stray whose parent
        dies of the group's SIGTERM before the scan is re-parented out of its reach.)"""
        strays = None
        for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(self.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
            if strays is None:
                strays = self._strays()
            for proc in strays:
                try:
                    proc.send_signal(sig)
                except Exception:  # noqa: BLE001 - already gone
                    pass
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if self.popen.poll() is not None and not _group_alive(self.pid):
                    break
                time.sleep(0.05)
            else:
                continue
            break
        self.popen.poll()
        self.close()

    def close(self) -> None:
        for f in (self._out, self._err):
            try:
                f.close()
            except OSError:
                pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def tail(path: Path, max_lines: int = 20, max_bytes: int = 8192) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - max_bytes))
            data = f.read()
    except OSError:
        return ""
    lines = data.decode(errors="replace").splitlines()
    return "\n".join(lines[-max_lines:])


def describe_returncode(code: int) -> tuple[int | None, str | None]:
    """(exit_code, signal name): Popen reports death by signal N as -N. When bash had to fork
    (a compound command) it reports a child killed by N as exit code 128+N, which is kept as
    the exact exit code it is."""
    if code < 0:
        try:
            return None, signal.Signals(-code).name
        except ValueError:
            return None, f"signal {-code}"
    return code, None
