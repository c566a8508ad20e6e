"""A real pseudo-distributed Hadoop cluster on this machine, one JVM per daemon.

NameNode, DataNode, ResourceManager and two NodeManagers run as separate java processes from
Apache Hadoop's Maven Central jars, each with its own ports (picked free at `up`), dirs and log
file. Config comes from the templates in docker/hadoop-cluster/conf/, the same ones the Docker
cluster uses. State lives in <workdir>/cluster.json so `down` and `status` find the exact
processes `up` started (pid plus start time, so a recycled pid is never killed).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import shutil
import signal
import socket
import string
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import requests

from tony_py import paths
from tony_py.bridge import jvm
from tony_py.cluster import jars
from tony_py.errors import SetupError

HOST = "127.0.0.1"
STATE_FILE = "cluster.json"

# Two NodeManagers; the first advertises 2 (static, plugin-less) GPUs, the second none.
NODEMANAGERS = ({"gpus": 2}, {"gpus": 0})  # the first runs YARN's GPU plugin (real or stand-in nvidia-smi)
GPU_MODE_ENV = "TONY_CLUSTER_GPUS"  # "auto" (default): the real nvidia-smi if it works, else the stand-in; "standin"
NM_MEMORY_MB = 12288
NM_VCORES = 16

# Heap per daemon: together (with JVM overhead) well under 4 GB of RSS.
_HEAP_MB = {"namenode": 256, "datanode": 192, "resourcemanager": 384, "nodemanager": 256}

_MAIN_CLASS = {
    "namenode": "org.apache.hadoop.hdfs.server.namenode.NameNode",
    "datanode": "org.apache.hadoop.hdfs.server.datanode.DataNode",
    "resourcemanager": "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager",
    "nodemanager": "org.apache.hadoop.yarn.server.nodemanager.NodeManager",
}

_PORT_NAMES = (
    "nn_rpc_port nn_http_port dn_data_port dn_http_port dn_ipc_port "
    "rm_port rm_scheduler_port rm_tracker_port rm_admin_port rm_web_port"
).split()
_NM_PORT_NAMES = ("nm_port", "nm_localizer_port", "nm_web_port", "nm_collector_port")


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


@dataclass
class ClusterState:
    workdir: str
    hadoop_version: str
    conf_dir: str
    lib_dir: str
    ports: dict[str, int]
    nodemanagers: list[dict]
    daemons: list[DaemonState] = field(default_factory=list)
    up_seconds: float | None = None

    @property
    def rm_web(self) -> str:
        return f"http://{HOST}:{self.ports['rm_web_port']}"

    @property
    def nn_web(self) -> str:
        return f"http://{HOST}:{self.ports['nn_http_port']}"

    @property
    def default_fs(self) -> str:
        return f"hdfs://{HOST}:{self.ports['nn_rpc_port']}"

    def to_json(self) -> dict:
        data = dict(self.__dict__)
        data["daemons"] = [d.__dict__ for d in self.daemons]
        return data

    @classmethod
    def from_json(cls, data: dict) -> "ClusterState":
        data = dict(data)
        data["daemons"] = [DaemonState(**d) for d in data.get("daemons", [])]
        return cls(**data)


def _free_ports(count: int) -> list[int]:
    """Ports free right now on HOST. Sockets stay open until all are chosen so no two match."""
    socks, ports = [], []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind((HOST, 0))
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


def _gpu_properties(nm: dict) -> str:
    """A GPU NodeManager runs YARN's GPU plugin (discovery through nvidia-smi); the others count
    none. Under the DefaultContainerExecutor the plugin discovers and counts, it does not
    isolate: which device is whose is the AM's to decide (docs/architecture.md, GPUs)."""
    if not nm.get("gpu_discovery"):
        return "  <property><name>yarn.nodemanager.resource-type.yarn.io/gpu</name><value>0</value></property>"
    props = {
        "yarn.nodemanager.resource-plugins": "yarn.io/gpu",
        "yarn.nodemanager.resource-plugins.gpu.allowed-gpu-devices": "auto",
        "yarn.nodemanager.resource-plugins.gpu.path-to-discovery-executables": nm["gpu_discovery"],
    }
    return "\n".join(f"  <property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())


def _standin_dir(nm: dict) -> str | None:
    """The stand-in nvidia-smi's directory, for the NodeManager that discovers with it."""
    return str(Path(nm["gpu_discovery"]).parent) if nm.get("gpu_standin") else None


def _render(template: Path, values: dict) -> str:
    try:
        return string.Template(template.read_text()).substitute(values)
    except KeyError as exc:
        raise SetupError(f"{template}: no value for placeholder {exc}") from exc


class LocalCluster:
    """Start, stop and inspect the cluster whose state lives in `workdir`."""

    def __init__(self, workdir: Path | str | None = None):
        self.workdir = Path(workdir or paths.default_cluster_workdir()).resolve()
        self.state_path = self.workdir / STATE_FILE

    # ---- state -------------------------------------------------------------------------
    def load_state(self) -> ClusterState | None:
        try:
            return ClusterState.from_json(json.loads(self.state_path.read_text()))
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as exc:
            raise SetupError(f"{self.state_path} is unreadable ({exc}); remove it") from exc

    def _save_state(self, state: ClusterState) -> None:
        tmp = self.state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state.to_json(), indent=2))
        tmp.replace(self.state_path)

    def status(self) -> dict:
        state = self.load_state()
        if state is None:
            return {"workdir": str(self.workdir), "state": "down", "daemons": {}}
        alive = {d.name: d.process() is not None for d in state.daemons}
        if all(alive.values()) and alive:
            overall = "running"
        elif any(alive.values()):
            overall = "degraded"
        else:
            overall = "down"
        info = {
            "workdir": str(self.workdir),
            "state": overall,
            "hadoop_version": state.hadoop_version,
            "hadoop_conf_dir": state.conf_dir,
            "hadoop_lib_dir": state.lib_dir,
            "resourcemanager_web": state.rm_web,
            "namenode_web": state.nn_web,
            "default_fs": state.default_fs,
            "daemons": {
                d.name: {"pid": d.pid, "alive": alive[d.name], "log": d.log} for d in state.daemons
            },
            "up_seconds": state.up_seconds,
        }
        if overall != "down":
            info["daemon_rss_mb"] = self._rss_mb(state)
        return info

    @staticmethod
    def _rss_mb(state: ClusterState) -> dict[str, float]:
        out = {}
        for d in state.daemons:
            proc = d.process()
            if proc is not None:
                try:
                    out[d.name] = round(proc.memory_info().rss / 2**20, 1)
                except psutil.Error:
                    pass
        out["total"] = round(sum(out.values()), 1)
        return out

    # ---- up ----------------------------------------------------------------------------
    def up(self, timeout: float = 180.0) -> tuple[ClusterState, bool]:
        """Start the cluster. Returns (state, started); started is False if it was running."""
        existing = self.load_state()
        if existing is not None:
            alive = [d for d in existing.daemons if d.process() is not None]
            if alive and len(alive) == len(existing.daemons):
                return existing, False
            if alive:
                names = ", ".join(sorted(set(d.name for d in existing.daemons) - set(a.name for a in alive)))
                raise SetupError(
                    f"the cluster in {self.workdir} is partly running ({names} stopped); "
                    "run `tony cluster down` first"
                )
        started = time.monotonic()
        version = jars.pinned_hadoop_version()
        lib = jars.ensure_hadoop_jars(version)
        state = self._configure(version, lib)
        self._save_state(state)
        try:
            self._start_daemons(state)
            self._save_state(state)
            self._wait_ready(state, deadline=time.monotonic() + timeout)
        except BaseException:
            self.down()
            raise
        state.up_seconds = round(time.monotonic() - started, 2)
        self._save_state(state)
        return state, True

    def _configure(self, version: str, lib: Path) -> ClusterState:
        data = self.workdir / "data"
        conf = self.workdir / "conf"
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        # One call: ports released by an earlier call could be handed out again.
        free = _free_ports(len(_PORT_NAMES) + len(_NM_PORT_NAMES) * len(NODEMANAGERS))
        ports = dict(zip(_PORT_NAMES, free))
        nms = []
        nm_ports = free[len(_PORT_NAMES):]
        discovery, standin = self._gpu_discovery()
        for i, nm in enumerate(NODEMANAGERS, start=1):
            chunk = nm_ports[(i - 1) * len(_NM_PORT_NAMES) : i * len(_NM_PORT_NAMES)]
            nms.append({"index": i, "gpus": nm["gpus"], "gpu_discovery": discovery if nm["gpus"] else None,
                        "gpu_standin": standin and bool(nm["gpus"]), **dict(zip(_NM_PORT_NAMES, chunk))})
        values = {
            "host": HOST,
            "user": getpass.getuser(),
            "data_dir": str(data),
            "conf_dir": str(conf),
            "lib_dir": str(lib),
            "nm_memory_mb": NM_MEMORY_MB,
            "nm_vcores": NM_VCORES,
            "nodemanager_properties": "",
            **ports,
        }
        templates = paths.CLUSTER_DEFINITION_DIR / "conf"
        self._write_conf_dir(conf, templates, values)
        for nm in nms:
            nm_values = dict(values, **{f"nm_{k}" if not k.startswith("nm_") else k: v for k, v in nm.items()})
            nm_values["nm_gpu_properties"] = _gpu_properties(nm)
            nm_values["nodemanager_properties"] = _render(templates / "nodemanager.xml", nm_values)
            self._write_conf_dir(self.workdir / f"conf-nm{nm['index']}", templates, nm_values)
        return ClusterState(
            workdir=str(self.workdir),
            hadoop_version=version,
            conf_dir=str(conf),
            lib_dir=str(lib),
            ports=ports,
            nodemanagers=nms,
        )

    def _gpu_discovery(self) -> tuple[str, bool]:
        """The nvidia-smi YARN's GPU plugin runs on the GPU NodeManager: this machine's own when
        it works, else a stand-in that reports two devices (copied into the workdir: the
        NodeManager also puts its directory first on its containers' PATH, for metrics)."""
        if os.environ.get(GPU_MODE_ENV, "auto") != "standin":
            real = shutil.which("nvidia-smi")
            if real:
                try:
                    subprocess.run([real, "-L"], capture_output=True, timeout=20, check=True)
                    return real, False
                except (OSError, subprocess.SubprocessError):
                    pass
        target = self.workdir / "gpu" / "nvidia-smi"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(paths.CLUSTER_DEFINITION_DIR / "gpu" / "nvidia-smi", target)
        target.chmod(0o755)
        return str(target), True

    @staticmethod
    def _write_conf_dir(target: Path, templates: Path, values: dict) -> None:
        target.mkdir(parents=True, exist_ok=True)
        for name in ("core-site.xml", "hdfs-site.xml", "yarn-site.xml", "capacity-scheduler.xml"):
            (target / name).write_text(_render(templates / name, values))
        shutil.copy(templates / "log4j.properties", target / "log4j.properties")

    def _java_cmd(self, state: ClusterState, daemon: str, conf_dir: str, log_name: str) -> list[str]:
        return [
            jvm.java_executable(),
            f"-Xmx{_HEAP_MB[daemon]}m",
            "-XX:MaxMetaspaceSize=160m",
            "-XX:ReservedCodeCacheSize=48m",
            "-XX:CICompilerCount=2",
            *jvm.FAST_START_OPTS,
            *jvm.JDK17_OPENS,
            f"-Dhadoop.log.dir={self.workdir / 'logs'}",
            f"-Dyarn.log.dir={self.workdir / 'logs'}",
            f"-Dhadoop.log.file={log_name}",
            f"-Dhadoop.home.dir={self.workdir}",
            "-Dhadoop.id.str=" + getpass.getuser(),
            "-cp",
            f"{conf_dir}:{state.lib_dir}/*",
            _MAIN_CLASS[daemon],
        ]

    def _daemon_env(self, state: ClusterState, conf_dir: str, path_first: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        if path_first:  # containers inherit the NodeManager's PATH (yarn.nodemanager.env-whitelist)
            env["PATH"] = f"{path_first}:{env.get('PATH', '')}"
        env["JAVA_HOME"] = str(jvm.java_home())
        env["HADOOP_CONF_DIR"] = conf_dir
        # Containers (started by the NodeManagers) see these through the env whitelist.
        env["HADOOP_HOME"] = str(self.workdir)
        env.pop("CLASSPATH", None)
        env.pop("MALLOC_ARENA_MAX", None)
        return env

    def _format_namenode(self, state: ClusterState) -> None:
        if (Path(state.workdir) / "data" / "namenode" / "current" / "VERSION").exists():
            return
        cmd = self._java_cmd(state, "namenode", state.conf_dir, "namenode-format.log")
        cmd += ["-format", "-force", "-nonInteractive", "-clusterid", "tony-py-local"]
        log = Path(state.workdir) / "logs" / "namenode-format.log"
        with open(log, "wb") as out:
            rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=self._daemon_env(state, state.conf_dir))
        if rc != 0:
            raise SetupError(f"formatting the NameNode failed (exit {rc}); see {log}")

    def _spawn(self, state: ClusterState, name: str, daemon: str, conf_dir: str, path_first: str | None = None) -> None:
        log = Path(state.workdir) / "logs" / f"{name}.log"
        cmd = self._java_cmd(state, daemon, conf_dir, f"{name}.log")
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self._daemon_env(state, conf_dir, path_first),
                cwd=state.workdir,
                start_new_session=True,  # outlives `tony cluster up`; immune to its Ctrl-C
            )
        try:
            created = psutil.Process(proc.pid).create_time()
        except psutil.Error:
            created = time.time()  # it died at once; _wait_ready reports it
        state.daemons.append(DaemonState(name=name, pid=proc.pid, create_time=created, log=str(log)))
        self._save_state(state)  # so a failed or interrupted `up` can still be taken down

    def _start_daemons(self, state: ClusterState) -> None:
        self._format_namenode(state)
        self._spawn(state, "namenode", "namenode", state.conf_dir)
        self._spawn(state, "datanode", "datanode", state.conf_dir)
        self._spawn(state, "resourcemanager", "resourcemanager", state.conf_dir)
        for nm in state.nodemanagers:
            idx = nm["index"]
            self._spawn(state, f"nodemanager{idx}", "nodemanager", str(Path(state.workdir) / f"conf-nm{idx}"),
                        _standin_dir(nm))

    def _wait_ready(self, state: ClusterState, deadline: float) -> None:
        want_nodes = len(state.nodemanagers)
        hdfs_ready = yarn_ready = False
        last = ""
        while time.monotonic() < deadline:
            dead = [d.name for d in state.daemons if d.process() is None]
            if dead:
                raise SetupError(
                    f"{', '.join(dead)} exited during start; see {Path(state.workdir) / 'logs'}"
                )
            try:
                if not hdfs_ready:
                    hdfs_ready, last = _hdfs_ready(state)
                if not yarn_ready:
                    yarn_ready, last = _yarn_ready(state, want_nodes)
            except requests.RequestException as exc:
                last = f"waiting for web endpoints ({exc.__class__.__name__})"
            if hdfs_ready and yarn_ready:
                return
            time.sleep(0.25)
        raise SetupError(f"the cluster did not become ready in time: {last}")

    # ---- one daemon (fault tests) ------------------------------------------------------
    def kill_daemon(self, name: str) -> int:
        """SIGKILL one daemon, as a machine failure would; returns its pid. Its containers
        (own sessions under DefaultContainerExecutor) keep running, as on a real lost node."""
        state = self.load_state()
        daemon = next((d for d in state.daemons if d.name == name), None) if state else None
        proc = daemon.process() if daemon else None
        if proc is None:
            raise SetupError(f"{name} is not running in {self.workdir}")
        proc.kill()
        proc.wait(timeout=10)
        return daemon.pid

    def restart_daemon(self, name: str, timeout: float = 120.0) -> None:
        """Start a stopped daemon again with its old config and wait until the cluster is ready."""
        state = self.load_state()
        if state is None:
            raise SetupError(f"no cluster in {self.workdir}")
        old = next((d for d in state.daemons if d.name == name), None)
        if old is not None and old.process() is not None:
            return
        state.daemons = [d for d in state.daemons if d.name != name]
        if name.startswith("nodemanager"):
            nm = next((n for n in state.nodemanagers if f"nodemanager{n['index']}" == name), {})
            self._spawn(state, name, "nodemanager", str(Path(state.workdir) / f"conf-{name.replace('nodemanager', 'nm')}"),
                        _standin_dir(nm))
        else:
            self._spawn(state, name, name, state.conf_dir)
        self._save_state(state)
        self._wait_ready(state, deadline=time.monotonic() + timeout)

    # ---- down --------------------------------------------------------------------------
    def down(self, purge: bool = False, grace: float = 10.0) -> list[str]:
        """Stop what `up` started. Returns the names of the daemons that were stopped."""
        state = self.load_state()
        stopped: list[str] = []
        if state is not None:
            procs = []
            # NodeManagers first so they stop their containers while HDFS is still up.
            order = sorted(state.daemons, key=lambda d: (not d.name.startswith("nodemanager"), d.name))
            for d in order:
                proc = d.process()
                if proc is None:
                    continue
                try:
                    proc.send_signal(signal.SIGTERM)
                    procs.append(proc)
                    stopped.append(d.name)
                except psutil.Error:
                    pass
            _gone, alive = psutil.wait_procs(procs, timeout=grace)
            _kill(alive)
            self._kill_container_leftovers()
            state.daemons = []
            self._save_state(state)
        if purge and self.workdir.exists():
            shutil.rmtree(self.workdir)
        return stopped

    def _kill_container_leftovers(self) -> None:
        """Kill processes of containers the NodeManagers started that outlived their NM: they
        run in their own sessions, in container working dirs under the NM local dirs."""
        ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        containers = re.compile(re.escape(str(self.workdir)) + r"/data/nm\d+/local/usercache/[^/]+/appcache/")
        _kill([p for p in psutil.process_iter(["cwd"])
               if containers.match(p.info.get("cwd") or "") and p.pid not in ours])


def _kill(procs: list[psutil.Process]) -> None:
    for proc in procs:
        try:
            proc.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(procs, timeout=5)


def _hdfs_ready(state: ClusterState) -> tuple[bool, str]:
    url = f"{state.nn_web}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"
    beans = requests.get(url, timeout=2).json().get("beans") or [{}]
    info = beans[0]
    live = json.loads(info.get("LiveNodes") or "{}")
    safemode = info.get("Safemode", "?")
    if live and safemode == "":
        return True, ""
    return False, f"HDFS: {len(live)} live DataNode(s), safe mode: {safemode or 'off'}"


def _yarn_ready(state: ClusterState, want: int) -> tuple[bool, str]:
    resp = requests.get(f"{state.rm_web}/ws/v1/cluster/nodes", timeout=2)
    nodes = ((resp.json().get("nodes") or {}).get("node")) or []
    running = [n for n in nodes if n.get("state") == "RUNNING"]
    if len(running) >= want:
        return True, ""
    return False, f"YARN: {len(running)}/{want} NodeManagers RUNNING"
