"""The executor: the supervisor of one task in one YARN container.

Per gang attempt:
  reserve port(s) ─▶ register host:port ─▶ long-poll for the cluster spec ─▶ set the env,
  release the ports, start the user process ─▶ heartbeat while it runs ─▶ report its exact
  exit code or signal ─▶ do what the AM answers: exit, or restart in place (next attempt).
An AM instruction to restart or stop can also arrive with any heartbeat; then the process group
is killed first. If the AM stops answering, the executor kills its process group and exits.

Before any of that it fetches what the job runs from the AM (GET /v1/job: the JobSpec and
tony-final.xml; GET /v1/src: the zipped src_dir when the AM serves it), signed with the app
secret it reads from the container's credentials (tony_py/appsecret.py); on a Kerberos cluster
YARN localized those files instead.

Standard library plus what the client ships with the job (psutil, when shipped, for metrics;
defusedxml to read YARN's GPU settings).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import signal
import socket
import stat
import sys
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from tony_py import appsecret
from tony_py.auth import Signer, Verifier
from tony_py.config.spec import FINAL_CONF_FILE, SPEC_FILE, JobSpec, TaskId
from tony_py.errors import EXECUTOR_AM_LOST, EXECUTOR_REFUSED
from tony_py.executor.channel import AmChannel, AmUnreachable, RequestRefused
from tony_py.executor.control import ControlServer
from tony_py.executor.gpus import find_nvidia_smi, nodemanager_assignment
from tony_py.executor.metrics import MetricsSampler
from tony_py.frameworks.envplan import expand
from tony_py.executor.process import UserProcess, describe_returncode, tail

log = logging.getLogger("tony.executor")

# What the AM accepts from an error file (its request bodies are capped at 1 MiB).
MAX_ERROR_FILE_BYTES = 64 << 20  # parsed whole up to this size, then cut field by field
MAX_ERROR_TEXT = 4000
MAX_TRACEBACK = 16000
# Variables that are the executor's business, not the user process's.
_PRIVATE_ENV = ("TONY_SRC_ZIP", "TONY_RUNTIME_DIR", "TONY_RESERVE_TB_PORT", "TONY_AM_LOST_TIMEOUT_S")


@dataclass
class Settings:
    task: str
    am_url: str
    secret: str = field(repr=False)
    container_id: str
    command: str
    execution_env: dict
    heartbeat_s: float
    metrics_interval_s: float
    execution_timeout_s: float
    registry_timeout_s: float
    reserve_tb_port: bool
    src_zip: str | None
    runtime_dir: str
    log_dir: Path
    am_lost_timeout_s: float
    single_node: bool = False
    host: str = "localhost"
    gpus: int = 0  # what the task's type asked for
    gpu_metrics: bool = True
    gpu_assignment: str = "auto"

    @classmethod
    def load(cls, env: dict, spec: JobSpec, secret: str) -> "Settings":
        """From the container env (where and who) and the job spec the AM served (what to run:
        YARN passes env values through a shell script unescaped, so commands do not travel there)."""
        task = TaskId.parse(env["TONY_TASK"])
        return cls(
            task=str(task),
            am_url=env["TONY_AM_URL"],
            secret=secret,
            container_id=env.get("CONTAINER_ID", ""),
            command=spec.command_for(task.type),
            execution_env=dict(spec.execution_env),
            heartbeat_s=spec.heartbeat_interval_ms / 1000,
            metrics_interval_s=spec.metrics_interval_ms / 1000,
            execution_timeout_s=spec.execution_timeout_ms / 1000,
            registry_timeout_s=float(spec.registry_timeout_s),
            reserve_tb_port=env.get("TONY_RESERVE_TB_PORT") == "1",
            src_zip=env.get("TONY_SRC_ZIP"),
            runtime_dir=env.get("TONY_RUNTIME_DIR", ""),
            log_dir=Path((env.get("LOG_DIRS") or ".").split(",")[0]),
            am_lost_timeout_s=float(spec.am_lost_timeout_s),
            single_node=spec.single_node,
            host=env.get("NM_HOST") or socket.getfqdn(),
            gpus=spec.type(task.type).resources.gpus,
            gpu_metrics=spec.gpu_metrics,
            gpu_assignment=spec.gpu_assignment,
        )


class Instruction(Exception):
    """The AM told this executor to exit or to restart at another attempt."""

    def __init__(self, answer: dict):
        super().__init__(answer.get("action"))
        self.action = answer.get("action")
        self.attempt = int(answer.get("attempt", 0))
        self.reason = answer.get("reason", "")


def _check(answer: dict | None) -> dict | None:
    if answer and answer.get("action") in ("exit", "restart"):
        raise Instruction(answer)
    return answer


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


class UnpackError(Exception):
    """The src_dir archive would write where it must not; the task cannot start."""


def unpack_src(zip_name: str | None, cwd: Path) -> None:
    """Unzip the job's src_dir into the container's working dir, once.

    The working dir holds the links YARN made to localized resources (venv, tony_runtime,
    the NodeManager's shared cache behind them): nothing is ever written through a link, so a
    src_dir entry named like one cannot change what later jobs get from that cache. Links in
    the archive are not recreated, and modes lose group/other write and set-id bits."""
    if not zip_name or (cwd / ".tony_src_unpacked").exists():
        return
    with zipfile.ZipFile(cwd / zip_name) as zf:
        for info in zf.infolist():
            mode = (info.external_attr >> 16) & 0o177777
            if stat.S_ISLNK(mode):
                log.warning("src_dir: skipped the symbolic link %s", info.filename)
                continue
            if _src_target(info.filename, cwd) is None:
                continue  # names the working dir itself ('./')
            target = Path(zf.extract(info, cwd))
            if not info.is_dir() and mode & 0o777:
                os.chmod(target, mode & 0o755)
    (cwd / ".tony_src_unpacked").touch()


def _src_target(name: str, cwd: Path) -> Path | None:
    """Where zipfile will write the entry `name` (None: cwd itself), refused unless it is
    inside cwd with no link on the way. Checked as zipfile writes it, not as it is named:
    zipfile drops a leading '/', '.' and '..' parts, so '/venv/x' and '../venv/x' land in
    'venv/x'; such names are refused outright."""
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        raise UnpackError(f"src_dir holds {name!r}: an absolute name or a '..' in it is not allowed; "
                          "rename that entry of src_dir")
    parts = [p for p in parts if p not in ("", ".")]
    if not parts:
        return None
    for depth in range(1, len(parts) + 1):
        if cwd.joinpath(*parts[:depth]).is_symlink():
            raise UnpackError(f"src_dir holds {name}, which would write into the localized resource "
                              f"{parts[0]!r}; rename that entry of src_dir")
    target = cwd.joinpath(*parts)
    if os.path.commonpath([os.path.realpath(cwd), os.path.realpath(target)]) != os.path.realpath(cwd):
        raise UnpackError(f"src_dir holds {name!r}, which would write outside the working dir")
    return target


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
    if settings.single_node:  # TonY's single-node job: the command knows it runs in the AM's container
        env["PREPROCESSING_JOB"] = "true"
        env["HOME"] = str(cwd)
    error_file = str(cwd / f"tony-error-{attempt}.json")
    env["TONY_ERROR_FILE"] = error_file
    env["TORCHELASTIC_ERROR_FILE"] = error_file
    env["TONY_PROGRESS_FILE"] = str(cwd / f"tony-progress-{attempt}")
    # What the process reports back to the AM (Horovod's driver: its rendezvous port).
    env["TONY_CALLBACK_FILE"] = str(cwd / f"tony-callback-{attempt}.json")
    env["DRIVER_OUTPUT_PATH"] = str(cwd)  # TonY's name for where its Horovod driver wrote that
    return env


def _describe_command(command: str) -> str:
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


def _listening(host: str, port: int) -> bool:
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


class Executor:
    def __init__(self, settings: Settings, channel: AmChannel, base_env: dict, cwd: Path, control_port: int | None = None):
        self.s = settings
        self.channel = channel
        self.base_env = base_env
        self.cwd = cwd
        self.yarn_gpus = self._yarn_gpus()
        self.control_port = control_port
        self.child: UserProcess | None = None
        self.progress_file: str | None = None
        self.callback_file: str | None = None
        self.tb_port: int | None = None
        self.reported: set[str] = set()
        self.sampler = MetricsSampler(False)
        self.terminated = threading.Event()

    def _body(self, attempt: int, **extra) -> dict:
        body = {"task": self.s.task, "attempt": attempt, "container": self.s.container_id}
        body.update((k, v) for k, v in extra.items() if v is not None)  # absent, not null: smaller
        return body

    def _yarn_gpus(self) -> list[str] | None:
        """The devices the NodeManager itself assigned to this container (its GPU plugin under
        the LinuxContainerExecutor): they replace the AM's choice in the task's environment."""
        if not self.s.gpus or self.s.gpu_assignment != "auto":
            return None
        devices = nodemanager_assignment(self.base_env.get("NM_HOST"), self.base_env.get("NM_HTTP_PORT"),
                                         self.s.container_id)
        if devices and self.base_env.get("YARN_CONTAINER_RUNTIME_TYPE") == "docker":
            # YARN's Docker runtime mounts only these devices and sets NVIDIA_VISIBLE_DEVICES
            # itself; inside the container they are numbered from 0, so the host indices would
            # name devices the task cannot see. Reported, not put into the env.
            log.info("the NodeManager assigned GPU(s) %s to this Docker container", ",".join(devices))
            return devices
        if devices:
            log.info("the NodeManager assigned GPU(s) %s to this container", ",".join(devices))
            self.base_env = {**self.base_env, "CUDA_VISIBLE_DEVICES": ",".join(devices)}
            if "NVIDIA_VISIBLE_DEVICES" in self.base_env:
                self.base_env["NVIDIA_VISIBLE_DEVICES"] = ",".join(devices)
        return devices

    def run(self) -> int:
        try:
            return self._run()
        finally:
            # Whatever ends the executor (an instruction, a lost AM, a bug), nothing it started
            # may outlive it.
            self._stop_child()

    def _run(self) -> int:
        attempt = 0
        while True:
            try:
                self.run_attempt(attempt)
                return 0
            except Instruction as ins:
                self._stop_child()
                if ins.action == "restart" and not self.terminated.is_set():
                    log.info("restarting in place for attempt %d", ins.attempt)
                    attempt = ins.attempt
                    continue
                log.info("exiting: %s", ins.reason or ins.action)
                return 0
            except AmUnreachable as exc:
                log.error("%s; killing the user process and exiting", exc)
                self._stop_child()
                return EXECUTOR_AM_LOST
            except RequestRefused as exc:
                log.error("the AM refused a call: %s; exiting", exc)
                return EXECUTOR_REFUSED

    def report_setup_failure(self, attempt: int, what: str, exc: Exception) -> int:
        """The task cannot start at all (its src_dir cannot be unpacked, …): say why, as a
        result, so the job's root cause names it."""
        log.error("%s: %s", what, exc)
        error = {"type": "TonyPySetupError", "message": f"{what}: {exc}"}
        try:
            _check(self.channel.post("/v1/result", self._body(attempt, exit_code=1, signal=None, error=error)))
        except (Instruction, AmUnreachable, RequestRefused) as report_error:
            log.error("could not report it: %s", report_error)
        return 1

    def run_attempt(self, attempt: int) -> None:
        socks = reserve_ports(2 if self.s.reserve_tb_port else 1)
        try:
            port = socks[0].getsockname()[1]
            tb_port = socks[1].getsockname()[1] if len(socks) > 1 else None
            _check(self.channel.post("/v1/register", self._body(attempt, port=port, tb_port=tb_port,
                                                                 control_port=self.control_port,
                                                                 pid=os.getpid(), gpus=self.yarn_gpus)))
            log.info("registered %s attempt %d on port %d", self.s.task, attempt, port)
            answer = self._wait_for_spec(attempt)
            env = user_env(self.s, self.base_env, expand(answer.get("env", {}), answer.get("shared")), attempt, self.cwd)
        finally:
            for s in socks:  # released just before the child binds them
                s.close()
        out = self.s.log_dir / f"attempt-{attempt}.stdout"
        err = self.s.log_dir / f"attempt-{attempt}.stderr"
        self.progress_file = env["TONY_PROGRESS_FILE"]
        self.callback_file = env["TONY_CALLBACK_FILE"]
        self.tb_port, self.reported = tb_port, set()
        gpu_metrics = self.s.gpus > 0 and self.s.gpu_metrics
        self.sampler = MetricsSampler(gpu_metrics, env.get("CUDA_VISIBLE_DEVICES"),
                                      find_nvidia_smi(self.base_env) if gpu_metrics else None)
        self.child = UserProcess(self.s.command, env, str(self.cwd), out, err)
        # Not the whole command: task_params may carry credentials, and this log is aggregated.
        log.info("started pid %d: %s", self.child.pid, _describe_command(self.s.command) or "(command not shown)")
        _check(self.channel.post("/v1/started", self._body(attempt, pid=self.child.pid)))
        code, timed_out = self._supervise(attempt)
        ended_at = time.time()
        exit_code, sig = describe_returncode(code)
        # Background processes the command left behind go with it (as at the end of a container).
        self.child.kill_group(grace_s=2.0)
        log.info("user process ended: %s", f"signal {sig}" if sig else f"exit code {exit_code}")
        result = self._body(
            attempt,
            exit_code=exit_code,
            signal=sig,
            timed_out=timed_out,
            ended_ago_s=time.time() - ended_at,
            stderr_tail=tail(err),
            error=read_error_file(env["TONY_ERROR_FILE"]),
            metrics=self._metrics(),
        )
        try:
            answer = self.channel.post("/v1/result", result)
        except RequestRefused as exc:
            # The AM could not take the details (too large, or not understood): the exit code
            # and signal still decide the job, so report them without the rest.
            log.error("the AM refused the full result (%s); reporting the exit status alone", exc)
            answer = self.channel.post("/v1/result", self._body(attempt, exit_code=exit_code, signal=sig,
                                                                timed_out=timed_out))
        _check(answer)

    def _wait_for_spec(self, attempt: int) -> dict:
        deadline = time.monotonic() + self.s.registry_timeout_s if self.s.registry_timeout_s > 0 else None
        while True:
            answer = _check(self.channel.wait_spec(self.s.task, attempt, self.s.container_id))
            if answer is not None:
                return answer
            if self.terminated.is_set():
                raise Instruction({"action": "exit", "reason": "terminated"})
            if deadline and time.monotonic() > deadline:
                raise SystemExit(
                    f"no cluster spec after {self.s.registry_timeout_s:.0f} s "
                    "(tony.task.executor.registry-timeout-sec)"
                )

    def _supervise(self, attempt: int) -> tuple[int, bool]:
        """Wait for the child, heartbeating; returns (returncode, timed_out)."""
        started = time.monotonic()
        next_beat = next_metrics = 0.0
        metrics: dict = {}
        while True:
            code = self.child.poll(timeout=0.1)
            if code is not None:
                return code, False
            now = time.monotonic()
            if self.terminated.is_set():
                raise Instruction({"action": "exit", "reason": "the container is being stopped"})
            if self.s.execution_timeout_s > 0 and now - started > self.s.execution_timeout_s:
                log.error("execution timeout (%.0f s): killing the process group", self.s.execution_timeout_s)
                self.child.kill_group()
                return self.child.returncode if self.child.returncode is not None else -9, True
            if now >= next_metrics:  # process-tree RSS: cheap, but not every second (tony.task.metrics-interval-ms)
                next_metrics = now + self.s.metrics_interval_s
                metrics = self._metrics()
            beat = now >= next_beat
            if beat:
                next_beat = now + self.s.heartbeat_s
                # a sample travels once, with the next heartbeat (the AM keeps the latest): the
                # heartbeats in between stay small for an AM serving thousands of them a second
                _check(self.channel.post("/v1/heartbeat", self._body(
                    attempt, metrics=metrics or None, progress_age_s=progress_age(self.progress_file))))
                metrics = {}
            self._report_once(attempt, probe_tensorboard=beat)

    def _report_once(self, attempt: int, probe_tensorboard: bool) -> None:
        """Things the AM waits for, each reported once: a callback file the process wrote, and
        TensorBoard listening on this task's TB_PORT."""
        if "callback" not in self.reported and self.callback_file and os.path.exists(self.callback_file):
            self.reported.add("callback")
            try:
                with open(self.callback_file) as f:
                    info = json.loads(f.read(4096))
                if not isinstance(info, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as exc:
                log.error("unreadable callback file %s: %s", self.callback_file, exc)
            else:
                _check(self.channel.post("/v1/callback", self._body(attempt, info=info)))
        if (probe_tensorboard and "tensorboard" not in self.reported and self.tb_port
                and _listening(self.s.host, self.tb_port)):
            self.reported.add("tensorboard")
            url = f"http://{self.s.host}:{self.tb_port}"
            log.info("TensorBoard is up at %s", url)
            _check(self.channel.post("/v1/tensorboard", self._body(attempt, url=url)))

    def _metrics(self) -> dict:
        return self.sampler.sample(self.child.pid if self.child is not None else None)

    def _stop_child(self) -> None:
        if self.child is not None and self.child.alive():
            log.info("killing the process group of pid %d", self.child.pid)
            self.child.kill_group()

    def on_sigterm(self, *_):
        # The NodeManager is stopping the container. The user process is in its own process
        # group, which the NodeManager does not signal: stop it here, fast (SIGKILL follows
        # within ~250 ms).
        self.terminated.set()
        if self.child is not None and self.child.alive():
            self.child.kill_group(grace_s=0.2)
        raise SystemExit(143)


def load_job(channel: AmChannel, cwd: Path, task: str) -> dict:
    """The job, as {"spec": JobSpec dict, "final_conf": tony-final.xml's text or None}: from the
    AM, or from the files YARN localized on a Kerberos cluster (tony_py/am/launch.py)."""
    spec_file = cwd / SPEC_FILE
    if spec_file.exists():
        return {"spec": json.loads(spec_file.read_text()), "final_conf": None}
    return channel.job(task)


def fetch_job_files(channel: AmChannel, settings: Settings, final_conf: str | None, cwd: Path) -> None:
    """What the AM serves instead of YARN localizing it: tony-final.xml (TonY's tasks find it in
    their working dir) and the zipped src_dir, unless YARN localized them (a Kerberos cluster,
    a src_dir too large for the AM). Never written through a link."""
    conf = cwd / FINAL_CONF_FILE
    if final_conf is not None and not conf.is_symlink() and not conf.exists():
        conf.write_text(final_conf)
    src = cwd / settings.src_zip if settings.src_zip else None
    if src is not None and not src.exists() and not src.is_symlink():
        partial = cwd / f".{settings.src_zip}.part"
        size = channel.download_src(settings.task, partial)
        partial.rename(src)
        log.info("fetched src_dir from the AM (%d bytes)", size)


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    env = dict(os.environ)
    cwd = Path.cwd()
    task = env["TONY_TASK"]
    secret = appsecret.take(cwd, env)
    principal = env.get("CONTAINER_ID") or task
    # Until the spec is in, the AM may be lost for as long as the job allows (an AM fail-over).
    channel = AmChannel(env["TONY_AM_URL"], Signer(secret, principal),
                        give_up_after_s=float(env["TONY_AM_LOST_TIMEOUT_S"]))
    try:
        job = load_job(channel, cwd, task)
        settings = Settings.load(env, JobSpec.from_dict(job["spec"]), secret)
    except AmUnreachable as exc:
        log.error("cannot get the job from the AM: %s", exc)
        sys.exit(EXECUTOR_AM_LOST)
    except (RequestRefused, ValueError, KeyError, OSError) as exc:
        log.error("cannot read the job (from the AM at %s): %s", env["TONY_AM_URL"], exc)
        sys.exit(EXECUTOR_REFUSED)
    control = ControlServer(env.get("NM_HOST") or socket.getfqdn(), Verifier(settings.secret), channel)
    executor = Executor(settings, channel, env, cwd, control_port=control.port)
    signal.signal(signal.SIGTERM, executor.on_sigterm)
    log.info("executor for %s in %s (pid %d); control endpoint %s:%d", settings.task, settings.container_id,
             os.getpid(), control.address, control.port)
    try:
        fetch_job_files(channel, settings, job.get("final_conf"), cwd)
    except AmUnreachable as exc:
        log.error("lost the AM while fetching the job's files: %s", exc)
        sys.exit(EXECUTOR_AM_LOST)
    except (RequestRefused, OSError) as exc:
        sys.exit(executor.report_setup_failure(0, "cannot fetch the job's files from the AM", exc))
    try:
        unpack_src(settings.src_zip, cwd)
    except (UnpackError, zipfile.BadZipFile, OSError) as exc:
        sys.exit(executor.report_setup_failure(0, "cannot unpack src_dir", exc))
    sys.exit(executor.run())
