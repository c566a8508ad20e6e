"""Local mode: `tony submit --local …` runs the whole job on this machine, with no YARN, HDFS
or JVM.

The same pieces as on a cluster, minus the cluster: the AM's job loop (AmRuntime: the
coordinator, its policy and HTTP server) runs in this process, and its containers are local
processes (LocalProcessPort: a working directory per container with links to the job's files,
YARN's launch script, a process group), each running the real executor. So the env contract,
restarts, timeouts, root cause, the status page and the exit codes are the ones the cluster
gives; only what needs a cluster is refused (remote paths, Docker, the cluster's classpath).

Files live in <cache>/local/<job id>/ (resources/, containers/, logs/<container>/): the logs
stay after the job for reading; job directories older than KEEP_S are removed at the next start.
GPUs: this machine's devices (CUDA_VISIBLE_DEVICES if set, else nvidia-smi's list) are handed
out as the AM hands them out on a node (tony_py/am/core/gpus.py); a task that asked for none sees
none.
"""

from __future__ import annotations

import getpass
import os
import shutil
import stat
import threading
import time
import zipfile
from pathlib import Path

from tony_py import appsecret, paths
from tony_py.am.core import gpus as gpu_book
from tony_py.am.launch import RUNTIME_LINK, JobMeta
from tony_py.am.local import LocalProcessPort
from tony_py.am.runtime import AmRuntime
from tony_py.client.job import JobStatus
from tony_py.client.prepare import SRC_LINK, VENV_LINK, PreparedJob, final_conf, is_remote, resource_entries
from tony_py.client.staging import RUNTIME_PACKAGES, package_root, zip_src_dir
from tony_py.config import checks
from tony_py.config.xmlconf import to_xml
from tony_py.errors import UsageError

HOST = "127.0.0.1"
NODE_ID = f"{HOST}:0"  # LocalProcessPort's one node
KEEP_S = 7 * 24 * 3600
KILL_WAIT_S = 20.0


def local_root() -> Path:
    return Path(os.environ.get("TONY_LOCAL_DIR") or paths.cache_dir() / "local")


# ---- checks: what only a cluster can do is refused up front ----------------------------------------
def check_local(prepared: PreparedJob, devices: list[str]) -> None:
    args, spec, conf = prepared.args, prepared.spec, prepared.conf
    for flag, value in (("--src_dir", args.src_dir), ("--python_venv", args.python_venv),
                        ("--sidecar_tensorboard_log_dir", spec.tensorboard_log_dir)):
        if value and is_remote(value):
            raise UsageError(f"{flag} {value}: local mode reads local paths only (no cluster file system)")
    if args.hdfs_classpath:
        raise UsageError("--hdfs_classpath: local mode has no cluster file system to read it from")
    for key in ["tony.containers.resources"] + [f"tony.{t.name}.resources" for t in spec.types]:
        for path, _, _ in resource_entries(conf, key):
            if is_remote(path):
                raise UsageError(f"{key}: {path}: local mode reads local paths only")
    if spec.docker_enabled:
        raise UsageError("tony.docker.enabled: local mode runs tasks as local processes, not in Docker images")
    wanted = {t.name: t.resources.gpus for t in spec.types if t.resources.gpus}
    total = sum(t.instances * t.resources.gpus for t in spec.types if t.resources.gpus)
    for name, gpus in wanted.items():
        if gpus > len(devices):
            raise UsageError(f"tony.{name}.gpus={gpus}: this machine has {len(devices)} GPU(s)"
                             + (f" ({','.join(devices)})" if devices else "") + " for local mode")
    if total > len(devices):
        raise UsageError(f"the job's tasks ask for {total} GPUs together; this machine has {len(devices)} for local "
                         "mode (lower tony.<type>.gpus or instances, or set CUDA_VISIBLE_DEVICES)")


# ---- the job's files ------------------------------------------------------------------------------------
def _runtime_dir(target: Path) -> Path:
    """What the cluster ships as the runtime archive, as links to this environment's packages."""
    (target / "deps").mkdir(parents=True)
    for package in RUNTIME_PACKAGES:
        location = package_root(package)
        if location is None:
            continue  # optional, as on the cluster
        (target / package if package == "tony_py" else target / "deps" / package).symlink_to(location)
    return target


def _unpack(archive: Path, target: Path) -> Path:
    """As a NodeManager unpacks an ARCHIVE resource (file modes kept: a venv's bin/python runs)."""
    with zipfile.ZipFile(archive) as z:
        for info in z.infolist():
            path = Path(z.extract(info, target))
            mode = (info.external_attr >> 16) & 0o777
            if mode and not info.is_dir():
                path.chmod(mode | stat.S_IRUSR)
    return target


def _prune(root: Path) -> None:
    cutoff = time.time() - KEEP_S
    for old in root.glob("local_*"):
        try:
            if old.stat().st_mtime < cutoff:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            continue


def stage_locally(prepared: PreparedJob, app_id: str, workdir: Path) -> JobMeta:
    args, spec = prepared.args, prepared.spec
    res = workdir / "resources"
    res.mkdir(parents=True)
    resources: dict[str, dict] = {}
    task_links: list[str] = []

    def add(name: str, path: Path, links: list[str]) -> None:
        resources[name] = {"path": str(path)}
        links.append(name)

    add(RUNTIME_LINK, _runtime_dir(res / "runtime"), task_links)
    if args.python_venv:
        add(VENV_LINK, _unpack(Path(args.python_venv), res / "venv"), task_links)
    src_zip = None
    if args.src_dir:
        src = Path(args.src_dir)
        add(SRC_LINK, src.resolve() if src.is_file() else zip_src_dir(src, res / SRC_LINK), task_links)
        src_zip = SRC_LINK
    type_links: dict[str, list[str]] = {}
    for key, links in [("tony.containers.resources", task_links)] + [
            (f"tony.{t.name}.resources", type_links.setdefault(t.name, [])) for t in spec.types]:
        for path, name, archive in resource_entries(prepared.conf, key):
            local = Path(path)
            if not local.exists():
                raise UsageError(f"{key}: {path} does not exist")
            name = checks.link_name(key, name or local.name)
            add(name, _unpack(local, res / f"unpacked-{name}") if archive else local.resolve(), links)
    # The spec and tony-final.xml come from the AM (GET /v1/job) and the secret from the port,
    # as on a cluster.
    return JobMeta(app_id=app_id, staging_dir=str(workdir), user=getpass.getuser(), resources=resources,
                   task_resources=task_links, task_python=prepared.task_python, src_zip=src_zip,
                   extra={"type_resources": {k: v for k, v in type_links.items() if v}})


# ---- the job ------------------------------------------------------------------------------------------
class LocalJob:
    """A job running in this process, with the handle `tony submit`'s live view reads (the
    fields of YARN's application report, from the coordinator instead of the RM)."""

    def __init__(self, app_id: str, workdir: Path, am: AmRuntime, port: LocalProcessPort):
        self.app_id = app_id
        self.workdir = workdir
        self.am = am
        self.port = port
        self.coordinator = am.coordinator
        self.report: dict = {}
        self.am_status: dict | None = None
        self.warnings: list[str] = []
        self.started = time.time()
        self.finished: float | None = None
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="local-am", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.am.run(self._stop)
        except Exception as exc:  # noqa: BLE001 - the job ends, saying why
            self.error = f"the local AM failed: {type(exc).__name__}: {exc}"
            self.coordinator.fail_job(self.error)
        finally:
            self.finished = time.time()

    @property
    def logs(self) -> Path:
        return self.workdir / "logs"

    def refresh(self) -> dict:
        c = self.coordinator
        done = c.done and self.finished is not None
        final = (c.final_status or "FAILED") if done else "UNDEFINED"
        self.am_status = self.am.status(True)
        self.report = {
            "app_id": self.app_id, "state": {"SUCCEEDED": "FINISHED"}.get(final, final) if done else "RUNNING",
            "final_status": final, "diagnostics": c.diagnostics() if done and final != "SUCCEEDED" else "",
            "tracking_url": self.am.url, "original_tracking_url": self.am.url, "attempt": 1,
            "start_time": int(self.started * 1000), "finish_time": int((self.finished or 0) * 1000), "local": True,
        }
        return self.report

    @property
    def tracking_url(self) -> str:
        return self.am.url

    def status(self) -> JobStatus:
        self.refresh()
        return JobStatus.of(self.app_id, self.report, self.am_status)

    def wait(self, timeout: float | None = None, poll_s: float = 0.2) -> str:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.refresh()["state"] == "RUNNING":
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{self.app_id} still running after {timeout} s")
            time.sleep(poll_s)
        return self.report["final_status"]

    def request_kill(self, reason: str) -> None:
        self.coordinator.kill(reason)

    def kill(self, reason: str = "killed by the TonY-py client") -> None:
        self.request_kill(reason)
        self._thread.join(KILL_WAIT_S)
        self.close()

    def cleanup(self) -> None:
        pass  # the job's directory keeps its logs; old ones are pruned at the next start

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.port.shutdown()
        self.am.close()

    def __enter__(self) -> "LocalJob":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def start_local(prepared: PreparedJob, env: dict[str, str] | None = None) -> LocalJob:
    """Check, stage and start a job on this machine; returns once its tasks are being started."""
    env = dict(os.environ if env is None else env)
    devices = gpu_book.local_devices(env)
    check_local(prepared, devices)
    root = local_root()
    root.mkdir(parents=True, exist_ok=True)
    _prune(root)
    app_id = f"local_{int(time.time() * 1000)}_{os.getpid() % 10000:04d}"
    workdir = root / app_id
    try:
        meta = stage_locally(prepared, app_id, workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise
    secret = appsecret.generate()
    logs = workdir / "logs"
    am = AmRuntime(prepared.spec, meta, secret, HOST, HOST, log_url=lambda t: (
        f"file://{logs / t.container.id}" if t.container else None),
        final_conf=to_xml(final_conf(prepared, app_id)))
    if prepared.spec.gpu_assignment == "auto":
        # a task sees the GPUs it was given (its launch env names them) and no others
        env["CUDA_VISIBLE_DEVICES"] = ""
        env.pop("NVIDIA_VISIBLE_DEVICES", None)
    # with tony.gpu.assignment=none every task sees what this machine shows, as on a cluster
    port = LocalProcessPort(workdir / "containers", HOST, am.queue.put, lambda name, r: Path(r["path"]), secret,
                            log_dir_for=lambda container_id: logs / container_id, base_env=env)
    coordinator = am.attach(port)
    coordinator.gpus.set_pool(NODE_ID, devices)
    coordinator.start()
    return LocalJob(app_id, workdir, am, port)
