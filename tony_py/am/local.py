"""A ClusterPort whose containers are processes on this machine.

Used where TonY-py runs tasks without asking YARN for containers: a single-node job (no
tony.<type>.instances: TonY ran the command in the AM's own container) and local mode (the
whole job on this machine, no cluster). A "container" here is what a NodeManager would make:
a working directory with a link per localized resource, YARN's launch script (same
`export NAME="value"` lines, same `{{PWD}}` / `<LOG_DIR>` / `<CPS>` expansion, so a job
behaves the same on both), a process group that `stop` ends with SIGTERM and then SIGKILL, and
the same allocated / started / completed events the JVM relays from YARN (cluster_events.py).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

from tony_py import appsecret
from tony_py.am.cluster_events import Allocated, Completed, GrantedContainer, Started
from tony_py.config.spec import TaskType

log = logging.getLogger("tony.am.local")

Emit = Callable[[dict], None]  # an event's wire form (cluster_events.py), as the JVM's arrive
Resolve = Callable[[str, dict], Path]  # (link name, resource description) -> a local path
KILL_GRACE_S = 0.25  # as a NodeManager: SIGTERM, then SIGKILL (yarn.nodemanager.sleep-delay-before-sigkill.ms)
EXIT_KILLED_BY_AM = -105  # YARN's ContainerExitStatus.KILLED_BY_APPMASTER


class LocalProcessPort:
    def __init__(self, root: Path, host: str, emit: Emit, resolve: Resolve, secret: str,
                 log_dir_for: Callable[[str], Path] | None = None, base_env: dict[str, str] | None = None,
                 on_progress: Callable[[float], None] | None = None, prefix: str = "local"):
        self.root = root
        self.host = host
        self.emit = emit
        self.resolve = resolve
        self.secret = secret
        self.log_dir_for = log_dir_for or (lambda container_id: root / container_id / "logs")
        self.base_env = dict(os.environ if base_env is None else base_env)
        self.on_progress = on_progress
        self.prefix = prefix
        self._seq = 0
        self._procs: dict[str, subprocess.Popen] = {}
        self._stopped: set[str] = set()
        self._lock = threading.Lock()

    # ---- ClusterPort ---------------------------------------------------------------------------
    def request(self, request_id: int, task_type: TaskType, count: int) -> None:
        r = task_type.resources
        for _ in range(count):
            with self._lock:
                self._seq += 1
                container_id = f"container_{self.prefix}_{self._seq:06d}"
            self.emit(Allocated(container=GrantedContainer(
                id=container_id, node_id=f"{self.host}:0", host=self.host, node_http="",
                resource={"memory-mb": r.memory_mb, "vcores": r.vcores, "yarn.io/gpu": r.gpus},
                allocation_request_id=request_id, priority=request_id)).wire())

    def cancel_requests(self, request_id: int) -> None:
        pass  # every request is granted at once: nothing is ever outstanding

    def launch(self, container_id: str, launch_spec: dict) -> None:
        workdir = self.root / container_id
        log_dir = self.log_dir_for(container_id)
        workdir.mkdir(parents=True)
        log_dir.mkdir(parents=True, exist_ok=True)
        for name, resource in launch_spec.get("resources", {}).items():
            (workdir / name).symlink_to(self.resolve(name, resource))
        # Where a NodeManager writes the container's credentials (with the secret the AM put
        # there), a local process finds the secret in a file only its user can read.
        appsecret.write(workdir / appsecret.SECRET_FILE, self.secret)
        env = dict(self.base_env)
        env.update(CONTAINER_ID=container_id, NM_HOST=self.host, LOG_DIRS=str(log_dir), PWD=str(workdir))
        script = workdir / "launch_container.sh"
        script.write_text(_launch_script(launch_spec, workdir, log_dir))
        proc = subprocess.Popen(["bash", str(script)], cwd=workdir, env=env, start_new_session=True,
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with self._lock:
            self._procs[container_id] = proc
        self.emit(Started(container_id=container_id).wire())
        threading.Thread(target=self._wait, args=(container_id, proc), name=f"wait-{container_id}", daemon=True).start()

    def stop(self, container_id: str) -> None:
        with self._lock:
            proc = self._procs.get(container_id)
            self._stopped.add(container_id)
        if proc is not None and proc.poll() is None:
            threading.Thread(target=_terminate, args=(proc,), daemon=True).start()

    def release(self, container_id: str) -> None:
        self.stop(container_id)

    def set_progress(self, progress: float) -> None:
        if self.on_progress is not None:
            self.on_progress(progress)

    def set_heartbeat_interval(self, ms: int) -> None:
        pass

    def blacklist(self, node_id: str) -> None:
        pass  # one machine: nowhere else to go

    def unblacklist(self, node_id: str) -> None:
        pass

    def node_count(self) -> int:
        return 1

    # ---- internals -------------------------------------------------------------------------------
    def _wait(self, container_id: str, proc: subprocess.Popen) -> None:
        code = proc.wait()
        with self._lock:
            stopped = container_id in self._stopped
            self._procs.pop(container_id, None)
        status = EXIT_KILLED_BY_AM if stopped and code != 0 else (128 - code if code < 0 else code)
        self.emit(Completed(container_id=container_id, exit_status=status, state="COMPLETE",
                            diagnostics="stopped by the AM" if stopped else "").wire())

    def shutdown(self, grace_s: float = 5.0) -> None:
        """Stop every container still running (the job is over, or the AM is going away)."""
        with self._lock:
            procs = list(self._procs.values())
        for proc in procs:
            _terminate(proc)
        deadline = time.monotonic() + grace_s
        for proc in procs:
            try:
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass


def _terminate(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _expand(text: str, workdir: Path, log_dir: Path) -> str:
    return text.replace("{{PWD}}", str(workdir)).replace("<LOG_DIR>", str(log_dir)).replace("<CPS>", ":")


def _launch_script(launch_spec: dict, workdir: Path, log_dir: Path) -> str:
    """What a NodeManager writes (Hadoop 3's UnixShellScriptBuilder): exports, then the command.
    The values were checked by the client (config/checks.py), so double quotes are safe."""
    lines = ["#!/bin/bash", "set -o pipefail"]
    for name, value in launch_spec.get("env", {}).items():
        lines.append(f'export {name}="{_expand(value, workdir, log_dir)}"')
    lines.append('exec /bin/bash -c "' + " ".join(_expand(c, workdir, log_dir) for c in launch_spec["commands"]) + '"')
    return "\n".join(lines) + "\n"
