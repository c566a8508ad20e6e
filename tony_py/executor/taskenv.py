"""What a task's process is given and what the executor reads back from it: ports held until it
starts, its environment, its progress file and its error file; and the one line the executor
logs about the command."""

from __future__ import annotations

import json
import math
import os
import shlex
import socket
import time
from pathlib import Path

from tony_py.auth import NOTEBOOK_TOKEN_PURPOSE, RAY_TOKEN_PURPOSE, derived_token
from tony_py.config.spec import NOTEBOOK_TYPE
from tony_py.executor import hadoop_env
from tony_py.executor.settings import Settings

# What the AM accepts from an error file (its request bodies are capped at 1 MiB).
MAX_ERROR_FILE_BYTES = 64 << 20  # parsed whole up to this size, then cut field by field
MAX_ERROR_TEXT = 4000
MAX_TRACEBACK = 16000
# Variables that are the executor's business, not the user process's.
_PRIVATE_ENV = ("TONY_SRC_ZIP", "TONY_RUNTIME_DIR", "TONY_RESERVE_TB_PORT", "TONY_AM_LOST_TIMEOUT_S",
                hadoop_env.YARN_CLASSPATH)



def reserve_ports(count: int) -> list[socket.socket]:
    """Bind (without listening) so no one else takes the ports until the child starts."""
    socks: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(sock)
            sock.bind(("", 0))
    except OSError:
        for sock in socks:
            sock.close()
        raise
    return socks


def user_env(settings: Settings, base: dict, spec_env: dict, attempt: int, cwd: Path) -> dict[str, str]:
    env = {k: v for k, v in base.items() if k not in _PRIVATE_ENV}
    # Hadoop sets MALLOC_ARENA_MAX=4, which slows TensorFlow ~3x (TonY #346).
    env.pop("MALLOC_ARENA_MAX", None)
    if settings.runtime_dir:
        # Keep tony_py (for tony_py.task) but not the AM/executor's third-party deps.
        deps = os.path.join(settings.runtime_dir, "deps")
        parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != deps]
        if parts:
            env["PYTHONPATH"] = os.pathsep.join(parts)
        else:
            env.pop("PYTHONPATH", None)
    runtime_path = env.get("PYTHONPATH", "")
    env.update({k: str(v) for k, v in settings.execution_env.items()})
    if "PYTHONPATH" in settings.execution_env and runtime_path:
        # --shell_env PYTHONPATH=...: the user's entries first, then tony_py (tony_py.task).
        env["PYTHONPATH"] = os.pathsep.join(p for p in (settings.execution_env["PYTHONPATH"], runtime_path) if p)
    env.update({k: str(v) for k, v in spec_env.items()})
    classpath = hadoop_env.task_classpath({**env, hadoop_env.YARN_CLASSPATH: base.get(hadoop_env.YARN_CLASSPATH, "")})
    if classpath:  # TonY's CLASSPATH=$(hadoop classpath --glob), for libhdfs (hadoop_env.py)
        env["CLASSPATH"] = classpath
    if settings.single_node:  # TonY's single-node job: the command knows it runs in the AM's container
        env["PREPROCESSING_JOB"] = "true"
        env["HOME"] = str(cwd)
    error_file = str(cwd / f"tony-error-{attempt}.json")
    env["TONY_ERROR_FILE"] = error_file
    # The task's own name (worker:1): unlike TASK_INDEX, never renumbered by a smaller gang.
    env["TONY_TASK_ID"] = settings.task
    env["TORCHELASTIC_ERROR_FILE"] = error_file
    env["TONY_PROGRESS_FILE"] = str(cwd / f"tony-progress-{attempt}")
    env["TONY_LEASE_FILE"] = str(cwd / f"tony-lease-{attempt}")  # tony_py.task.holds_lease (lease.py)
    # Written just before a preemption's SIGTERM: when YARN kills the container (epoch seconds).
    # A file, not a variable: a running process's environment cannot change.
    env["TONY_PREEMPTION_DEADLINE_FILE"] = str(cwd / f"tony-preemption-{attempt}")
    # What the process reports back to the AM (Horovod's driver: its rendezvous port).
    env["TONY_CALLBACK_FILE"] = str(cwd / f"tony-callback-{attempt}.json")
    env["DRIVER_OUTPUT_PATH"] = str(cwd)  # TonY's name for where its Horovod driver wrote that
    if settings.task.split(":", 1)[0] == NOTEBOOK_TYPE:
        # Jupyter reads JUPYTER_TOKEN; the client derives the same token from the app secret, so
        # it is in no file, spec or log (tony_py/client/notebook.py)
        env["JUPYTER_TOKEN"] = derived_token(settings.secret, NOTEBOOK_TOKEN_PURPOSE)
    if settings.framework == "ray" and "RAY_AUTH_MODE" not in env:
        # Ray's servers listen on every address and run whatever code reaches them: its token
        # authentication, with a token derived from the app secret (in no spec or log; the
        # client shows it to the user for the dashboard). --shell_env RAY_AUTH_MODE=… opts out.
        env["RAY_AUTH_MODE"] = "token"
        env["RAY_AUTH_TOKEN"] = derived_token(settings.secret, RAY_TOKEN_PURPOSE)
    return env


def describe_command(command: str) -> str:
    """What the "started" log line may name: the base name of the first .py/.sh word, or the
    module after -m, else nothing. Any other word may be a credential (`--token s3cr3t`,
    `env KEY=v`), and the log is aggregated with the container's."""
    try:
        words = shlex.split(command)
    except ValueError:
        return ""
    for i, word in enumerate(words):
        module = words[i + 1] if word == "-m" and i + 1 < len(words) else ""
        if module and all(part.isidentifier() for part in module.split(".")):
            return f"-m {module}"
        if word.endswith((".py", ".sh")) and not word.startswith("-") and "=" not in word:
            return os.path.basename(word)
    return ""


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


def progress_age(path: str) -> float | None:
    """Seconds since the task last touched its progress file (None: never)."""
    try:
        return max(0.0, time.time() - os.stat(path).st_mtime)
    except OSError:
        return None


def read_error_file(path: str) -> dict | None:
    """The task's error file (tony_py.task.record's format, or torchelastic's @record format),
    cut to a size the AM accepts: a huge exception message must not cost the exit code."""
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_ERROR_FILE_BYTES + 1)
    except OSError:
        return None
    try:
        data = json.loads(raw[:MAX_ERROR_FILE_BYTES])
    except ValueError:
        text = raw[:MAX_ERROR_TEXT].decode(errors="replace")
        return {"type": "error", "message": f"unreadable error file ({len(raw)} bytes): {text}"}
    if not isinstance(data, dict):
        data = {"message": str(data)}
    elif isinstance(data.get("message"), dict):  # torch.distributed.elastic's error file
        inner = data["message"]
        text = str(inner.get("message", ""))
        extra = inner.get("extraInfo") or {}
        try:
            when = float(extra.get("timestamp"))
        except (TypeError, ValueError):
            when = None
        data = {"type": text.split(":", 1)[0] if ":" in text else "error", "message": text,
                "traceback": extra.get("py_callstack"), "time": when}
    out = {}
    for key, limit in (("type", 200), ("message", MAX_ERROR_TEXT), ("traceback", MAX_TRACEBACK), ("task", 100)):
        if data.get(key) is not None:
            text = str(data[key])
            out[key] = text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"
    if isinstance(data.get("time"), (int, float)) and math.isfinite(data["time"]):
        out["time"] = float(data["time"])
    return out
