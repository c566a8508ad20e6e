"""Helpers shared by the integration tests and their fixtures (conftest.py): a handle on the
test cluster (YARN REST, WebHDFS, container logs), the CLI runner's result, leftover checks."""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
import requests


ROOT = Path(__file__).resolve().parents[2]
JOBS = Path(__file__).with_name("jobs")
PYTHON = sys.executable
USER = getpass.getuser()


def node_resource(node: dict, name: str) -> int:
    """A node's total of a resource, from the RM's /ws/v1/cluster/nodes: its totalResource (3.3+),
    else (3.2.x has none) what it has available plus what is used."""
    def value(resource: dict | None) -> int:
        infos = ((resource or {}).get("resourceInformations") or {}).get("resourceInformation") or []
        return sum(int(r["value"]) for r in infos if r["name"] == name)
    if "totalResource" in node:
        return value(node["totalResource"])
    return value(node.get("availableResource")) + value(node.get("usedResource"))


def worker_suffix() -> str:
    """'-gw0' on pytest-xdist's worker gw0 ('' in a serial run): per-worker cluster dirs."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    return f"-{worker}" if worker else ""


@dataclass
class Cluster:
    kind: str
    conf_dir: Path
    rm_web: str
    nn_web: str
    lib_dir: Path | None = None
    workdir: Path | None = None
    nodemanagers: list[dict] = field(default_factory=list)
    launcher: object | None = None  # the DockerCluster, for the multi-host tests
    rm_webs: list[str] = field(default_factory=list)  # an HA pair's RMs: REST goes to the active one
    # What asks the RM's REST API: requests, or on a cluster whose web UIs want Kerberos a
    # spnego.Session with the superuser's credentials (secure/conftest.py).
    http: object = field(default=requests, repr=False)

    def rm(self) -> str:
        """The web address of the RM that serves REST now: the active one of an HA pair (a standby
        redirects, a dead one does not answer), else the only one."""
        for url in self.rm_webs:
            try:
                if self.http.get(f"{url}/ws/v1/cluster/info", timeout=2).json()["clusterInfo"]["haState"] == "ACTIVE":
                    return url
            except (requests.RequestException, ValueError, KeyError):
                continue
        return self.rm_web

    def env(self, **extra) -> dict[str, str]:
        env = dict(os.environ)
        env["HADOOP_CONF_DIR"] = str(self.conf_dir)
        env.pop("TONY_CONF_DIR", None)
        env.update(extra)
        return env

    # ---- YARN --------------------------------------------------------------------------------
    def apps(self, states: str | None = None) -> list[dict]:
        url = f"{self.rm()}/ws/v1/cluster/apps" + (f"?states={states}" if states else "")
        return ((self.http.get(url, timeout=5).json().get("apps") or {}).get("app")) or []

    def app(self, app_id: str) -> dict:
        return self.http.get(f"{self.rm()}/ws/v1/cluster/apps/{app_id}", timeout=5).json()["app"]

    def nodes(self) -> list[dict]:
        return self.http.get(f"{self.rm()}/ws/v1/cluster/nodes", timeout=5).json()["nodes"]["node"]

    def gpu_node_id(self) -> str:
        for node in self.nodes():
            if node_resource(node, "yarn.io/gpu") > 0:
                return node["id"]
        raise AssertionError("no GPU node in the cluster")

    def am_status(self, app_id: str) -> dict | None:
        """The AM's status.json while the application runs (None before/after)."""
        app = self.app(app_id)
        if app.get("state") != "RUNNING" or not app.get("amHostHttpAddress"):
            return None
        url = app.get("trackingUrl") or ""
        try:
            resp = requests.get(url.rstrip("/") + "/status.json", timeout=3)
            return resp.json() if resp.ok and resp.headers.get("Content-Type", "").startswith("application/json") else None
        except (requests.RequestException, ValueError):
            return None

    # ---- HDFS --------------------------------------------------------------------------------
    def hdfs_list(self, path: str) -> list[str]:
        resp = requests.get(f"{self.nn_web}/webhdfs/v1{path}", params={"op": "LISTSTATUS", "user.name": USER}, timeout=5)
        if resp.status_code == 404:
            return []
        return [s["pathSuffix"] for s in resp.json()["FileStatuses"]["FileStatus"]]

    def staging_dirs(self) -> list[str]:
        return [n for n in self.hdfs_list(f"/user/{USER}/.tony") if n.startswith("application_")]

    def hdfs_read_dir(self, path: str) -> str:
        """The text of every file in an HDFS directory ('' while it does not exist)."""
        return "".join(requests.get(f"{self.nn_web}/webhdfs/v1{path}/{name}", params={"op": "OPEN", "user.name": USER},
                                    timeout=10).text for name in self.hdfs_list(path))

    def hdfs_tree(self, path: str) -> dict[str, dict]:
        """{relative path: WebHDFS file status} of every file under `path` (read through WebHDFS,
        not through the code under test)."""
        out = {}
        for name in self.hdfs_list(path):
            status = self.hdfs_status(f"{path}/{name}")
            if status["type"] == "DIRECTORY":
                out.update({f"{name}/{k}": v for k, v in self.hdfs_tree(f"{path}/{name}").items()})
            else:
                out[name] = status
        return out

    def hdfs_status(self, path: str) -> dict:
        return requests.get(f"{self.nn_web}/webhdfs/v1{path}", params={"op": "GETFILESTATUS", "user.name": USER},
                            timeout=5).json()["FileStatus"]

    def hdfs_mkdir(self, path: str) -> None:
        requests.put(f"{self.nn_web}/webhdfs/v1{path}", params={"op": "MKDIRS", "user.name": USER}, timeout=10)

    def hdfs_delete(self, path: str) -> None:
        requests.delete(f"{self.nn_web}/webhdfs/v1{path}", params={"op": "DELETE", "recursive": "true",
                                                                   "user.name": USER}, timeout=10)

    def kill_app(self, app_id: str) -> None:
        requests.put(f"{self.rm()}/ws/v1/cluster/apps/{app_id}/state", json={"state": "KILLED"},
                     params={"user.name": USER}, timeout=10)

    # ---- logs ---------------------------------------------------------------------------------
    def container_dirs(self, app_id: str) -> list[Path]:
        if self.workdir is None:
            raise pytest.skip.Exception("container logs are read from the process launcher's NM dirs")
        return sorted(self.workdir.glob(f"data/nm*/logs/{app_id}/container_*"))

    def task_logs(self, app_id: str) -> dict[str, dict[str, str]]:
        """{task name: {file name: text}} for the app's task containers (not the AM's)."""
        out: dict[str, dict[str, str]] = {}
        for cdir in self.container_dirs(app_id):
            files = {p.name: p.read_text(errors="replace") for p in cdir.iterdir() if p.is_file()}
            executor_log = files.get("executor.log", "")
            marker = "executor for "
            if marker in executor_log:
                task = executor_log.split(marker, 1)[1].split()[0]
                out.setdefault(task, {}).update(files)
        return out

    # ---- Docker cluster: hosts ----------------------------------------------------------------
    def daemon_on(self, host: str) -> str:
        """The daemon name ('nodemanager2') of a host name YARN reports."""
        short = host.split(".", 1)[0]
        return f"nodemanager{short.removeprefix('nm')}" if short.startswith("nm") else short

    def run_on(self, daemon: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
        """A command inside a daemon's container (its own PID and network namespaces)."""
        container = self.launcher.load_state().node(daemon).container
        return subprocess.run(["docker", "exec", container, *cmd], capture_output=True, text=True, timeout=60,
                              check=check)

    def am_log(self, app_id: str) -> str:
        return "".join(p.read_text(errors="replace") for d in self.container_dirs(app_id)
                       for p in d.glob("am.log"))



@dataclass
class Run:
    rc: int
    stdout: str
    stderr: str
    app_id: str | None

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


def wait_for(predicate, timeout: float, what: str, explain=None):
    """Poll until predicate() returns something truthy; fail the test after `timeout` s (with
    explain()'s account of what the test waited on, when given)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.25)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}" + (f"\n{explain()}" if explain else ""))


def finish(proc: subprocess.Popen, timeout: float) -> None:
    """Wait for a client; past the timeout, Ctrl-C it (so it kills its YARN application)
    before giving up on it, and fail the test."""
    try:
        proc.wait(timeout=timeout)
        return
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
    raise AssertionError(f"the client did not finish within {timeout} s (interrupted it)")


def app_id_in(text: str) -> str | None:
    for word in text.replace(":", " ").split():
        if word.startswith("application_"):
            return word
    return None



class Background:
    """The real CLI in the background, its output collected."""

    def __init__(self, cluster, args, env: dict | None = None):
        self.proc = subprocess.Popen([PYTHON, "-m", "tony_py.submit", *args], cwd=ROOT, env=cluster.env(**(env or {})),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.out: list[str] = []
        self.err = ""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.out.append(line)
        self.err = self.proc.stderr.read()

    @property
    def app_id(self):
        return app_id_in("".join(self.out))

    def wait(self, timeout=300) -> Run:
        finish(self.proc, timeout)
        self._reader.join(timeout=10)
        return Run(self.proc.returncode, "".join(self.out), self.err, self.app_id)


def tasks_running(cluster, job, attempt=0, count=None):
    """The AM's task table once every task (or `count`) runs in the given gang attempt."""
    if not job.app_id:
        return None
    status = cluster.am_status(job.app_id)
    if not status or not status.get("tasks"):
        return None
    running = [t for t in status["tasks"] if t["state"] == "RUNNING" and t["attempt"] == attempt]
    want = count if count is not None else len(status["tasks"])
    return status if len(running) >= want else None


def am_processes(app_id):
    return [p for p in psutil.process_iter(["name", "cmdline", "cwd"])
            if p.info["name"] == "java" and "io.tonypy.am.ApplicationMaster" in " ".join(p.info["cmdline"] or [])
            and app_id in (p.info["cwd"] or "")]


def history_of(cluster, app_id: str, *flags: str) -> dict:
    """`tony history show APP --json` with flags (--events, when none are given): the job as its
    history keeps it."""
    proc = subprocess.run([PYTHON, "-m", "tony_py.cli", "history", "show", app_id, *(flags or ("--events",)), "--json"],
                          cwd=ROOT, env=cluster.env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def executor_pid(cluster, app_id: str, container: str) -> int:
    """The pid of the executor in a container (in its node's PID namespace: its log says it)."""
    for d in cluster.container_dirs(app_id):
        if d.name == container:
            return int(re.search(r"executor for \S+ in \S+ \(pid (\d+)\)", (d / "executor.log").read_text()).group(1))
    raise AssertionError(f"no executor log for {container}")


def container_credentials(cluster, app_id: str) -> dict[str, dict[str, bytes]]:
    """The secret keys of each of the app's containers' token files (the NodeManager writes them
    into the container's working dir), by container id. A file the NodeManager is still writing
    (CI: read empty while it localized the AM) is left out: the callers poll until it is whole."""
    from tony_py.appsecret import read_secret_keys

    out = {}
    for f in cluster.workdir.glob(f"data/nm*/local/usercache/*/appcache/{app_id}/container_*/container_tokens"):
        try:
            out[f.parent.name] = read_secret_keys(f)
        except RuntimeError:
            continue
    return out


def app_secret(cluster, app_id: str) -> str | None:
    """The job's secret, as its AM reads it: from the AM container's credentials (None until the
    AM's container is there; gone with it)."""
    from tony_py.appsecret import CREDENTIALS_ALIAS

    am = [keys for container, keys in container_credentials(cluster, app_id).items() if container.endswith("_000001")]
    return am[0][CREDENTIALS_ALIAS].decode() if am else None


def probe_records(tmp_path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (tmp_path / "probe").glob("*.json")}



def _has_python_parent(proc: psutil.Process) -> bool:
    try:
        parent = proc.parent()
        return parent is not None and "python" in " ".join(parent.cmdline()[:1])
    except psutil.Error:
        return False


def _cluster_id(cluster: Cluster) -> str | None:
    """The ResourceManager's cluster timestamp, which every container id of this cluster carries
    (container_<ts>_…); the last one seen if the RM does not answer now (a fault test)."""
    try:
        cluster_id = str(requests.get(f"{cluster.rm()}/ws/v1/cluster/info", timeout=5).json()["clusterInfo"]["id"])
        _CLUSTER_IDS[cluster.rm_web] = cluster_id
    except (requests.RequestException, ValueError, KeyError):
        pass
    return _CLUSTER_IDS.get(cluster.rm_web)


_CLUSTER_IDS: dict[str, str] = {}


def stray_processes(cluster: Cluster) -> list[psutil.Process]:
    """Executors and user processes still alive from this cluster's finished jobs, and client JVMs
    whose client is gone (the JVM a `tony submit` starts early must end with it, bad input or not).
    This cluster's only: a process counts if it works under the cluster's data dir or its
    container id is one of this cluster's, so jobs of another cluster on the machine (a
    developer's, or a second checkout's) are neither reported nor killed."""
    if cluster.workdir is None:
        return []
    root = str(cluster.workdir / "data") + os.sep
    cluster_id = _cluster_id(cluster)
    conf_dir = os.path.realpath(cluster.conf_dir)
    strays = []
    for proc in psutil.process_iter(["cmdline", "cwd", "environ"]):
        try:
            cmd = " ".join(proc.info.get("cmdline") or [])
            cwd = (proc.info.get("cwd") or "") + os.sep
            env = proc.info.get("environ") or {}
        except psutil.Error:
            continue
        ours = cwd.startswith(root) or bool(cluster_id and f"_{cluster_id}_" in env.get("CONTAINER_ID", ""))
        # a client's JVM is this cluster's if its client was pointed at this cluster's conf
        orphan_client_jvm = ("py4j.GatewayServer" in cmd and not _has_python_parent(proc)
                             and os.path.realpath(env.get("HADOOP_CONF_DIR") or "/") == conf_dir)
        if (ours and ("tony_py.executor" in cmd or "tony_py.am" in cmd or "/appcache/" in cwd)) or orphan_client_jvm:
            strays.append(proc)
    return strays


def _alive(proc: psutil.Process) -> bool:
    """Running, and not a zombie (an exited process its new parent has yet to reap holds nothing)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_clean(cluster: Cluster, timeout: float = 30.0) -> dict:
    """Wait for running apps, staging dirs and stray processes to be gone; returns what is left.
    A daemon slow to answer (a loaded machine: a NameNode in a pause) is asked again until the
    deadline, not taken for a leak or an error; one that never answers fails the test saying so."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            left = {
                "apps": [a["id"] for a in cluster.apps("NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING")],
                "staging": cluster.staging_dirs(),
                "processes": [f"{p.pid}: {' '.join(p.info.get('cmdline') or [])[:120]}"
                              for p in stray_processes(cluster) if _alive(p)],
            }
        except requests.RequestException as exc:
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster's daemons did not answer for {timeout:.0f} s: {exc}") from None
            time.sleep(1.0)
            continue
        if not any(left.values()) or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def clean_up(cluster: Cluster, left: dict) -> None:
    """Remove what a test left behind (after it was reported): kill its applications, delete
    its staging dirs, kill its processes, and wait for the cluster to be idle again."""
    for app_id in left["apps"]:
        cluster.kill_app(app_id)
    for proc in stray_processes(cluster):
        try:
            proc.kill()
        except psutil.Error:
            pass
    wait_for(lambda: not cluster.apps("NEW,NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING"), 60, "leftover apps to end")
    for name in cluster.staging_dirs():
        cluster.hdfs_delete(f"/user/{USER}/.tony/{name}")


# ---- a Docker engine --------------------------------------------------------------------------------
def need_docker_engine(what: str) -> None:
    """Skip with the reason where this machine has no Docker engine, or fail where
    TONY_TEST_DOCKER=required (CI: the multi-host tests must run there)."""
    from tony_py.cluster.engine import engine_available

    usable, why = engine_available()
    if not usable:
        if os.environ.get("TONY_TEST_DOCKER") == "required":
            pytest.fail(f"TONY_TEST_DOCKER=required, but {why}", pytrace=False)
        pytest.skip(f"no Docker engine for {what}: {why}")


# ---- a real browser ----------------------------------------------------------------------------------
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
ARTIFACTS = ROOT / "test-artifacts"


class Browser:
    """Debian's chromium, headless, driven by Playwright; console errors are collected."""

    def __enter__(self):
        from playwright.sync_api import sync_playwright

        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        self.errors: list[str] = []
        return self

    def page(self):
        page = self.browser.new_page(viewport={"width": 1400, "height": 900})
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda exc: self.errors.append(str(exc)))
        return page

    def __exit__(self, *exc):
        self.browser.close()
        self._pw.stop()


def screenshot(page, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.screenshot(path=str(path), full_page=True)
    return path
