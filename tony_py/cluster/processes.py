"""A real pseudo-distributed Hadoop cluster on this machine, one JVM per daemon.

NameNode, DataNode, ResourceManager and two NodeManagers run as separate java processes from
Apache Hadoop's Maven Central jars, each with its own ports (picked free at `up`), dirs and log
file, all on 127.0.0.1. With `ha`, two ResourceManagers (rm1, rm2) elect the active one through
a ZooKeeper of their own and keep their state in it (availability.py). Every RM and NodeManager
runs with recovery on, so any of them may be restarted under running jobs (restart_daemon).
Config and JVM command lines come from definition.py, the same as the Docker launcher's
(docker.py). State lives in <workdir>/cluster.json (daemons.py's ClusterState) so `down` and
`status` find the exact processes `up` started (pid plus start time: a recycled pid is never killed).
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import psutil

from tony_py import paths
from tony_py.bridge import jvm
from tony_py.cluster import availability, definition, jars, kdc, secure
from tony_py.cluster.definition import overall_state, read_state, save_state
from tony_py.cluster.ports import claim_ports, release_ports
from tony_py.cluster.daemons import (HOST, KIND, ClusterState, DaemonState, kill_all, own_conf_dir,
                                     standin_dir)
from tony_py.errors import SetupError

STATE_FILE = definition.STATE_FILE

# Two NodeManagers; the first advertises 2 GPUs through YARN's GPU plugin (real or stand-in
# nvidia-smi), the second none.
NODEMANAGERS = ({"gpus": 2}, {"gpus": 0})
GPU_MODE_ENV = "TONY_CLUSTER_GPUS"  # "auto" (default): the real nvidia-smi if it works, else the stand-in; "standin"
# Every daemon on one host: a lost NodeManager is a killed process, noticed in 10 s.
TIMERS = definition.Timers(nm_expiry_ms=10_000, am_expiry_ms=600_000, rm_connect_max_wait_ms=20_000)
# An HA cluster is for maintenance: a NodeManager restarted on a loaded machine (a JVM start and its
# recovery) must be back before YARN calls its node lost (production: 10 min), and a client must
# wait out a fail-over on one (the ZooKeeper session, then the standby's start as the active).
HA_TIMERS = dataclasses.replace(TIMERS, nm_expiry_ms=30_000, rm_connect_max_wait_ms=120_000)


class LocalCluster:
    """Start, stop and inspect the cluster whose state lives in `workdir`."""

    kind = KIND

    def __init__(self, workdir: Path | str | None = None):
        self.workdir = Path(workdir or paths.default_cluster_workdir()).resolve()
        self.state_path = self.workdir / STATE_FILE

    # ---- state -------------------------------------------------------------------------
    def load_state(self) -> ClusterState | None:
        return read_state(self.state_path, ClusterState)

    def _save_state(self, state: ClusterState) -> None:
        save_state(self.state_path, state)

    def status(self) -> dict:
        state = self.load_state()
        if state is None:
            return {"workdir": str(self.workdir), "state": "down", "kind": self.kind, "daemons": {}}
        alive = {d.name: d.process() is not None for d in state.daemons}
        info = {
            "workdir": str(self.workdir),
            "kind": self.kind,
            "state": overall_state(alive),
            "hadoop_version": state.hadoop_version,
            "java_home": state.java_home,
            "hadoop_conf_dir": state.conf_dir,
            "hadoop_lib_dir": state.lib_dir,
            "resourcemanager_web": state.rm_web,
            "namenode_web": state.nn_web,
            "default_fs": state.default_fs,
            "daemons": {
                d.name: {"pid": d.pid, "alive": alive[d.name], "log": d.log} for d in state.daemons
            },
            "up_seconds": state.up_seconds,
            "secure": state.kerberos is not None,
            **availability.ha_status(state.rm_webs, state.ha),
        }
        if state.kerberos:
            info.update(secure.status(state.kerberos))
        if info["state"] != "down":
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
    def up(self, timeout: float = 180.0, kerberos: bool = False, ha: bool = False,
           recovery: bool = True, hadoop_version: str | None = None,
           java_home: str | None = None) -> tuple[ClusterState, bool]:
        """Start the cluster (with kerberos: a secure one, its own KDC included; with ha: two
        ResourceManagers and a ZooKeeper; without recovery: RMs and NodeManagers that forget
        running jobs when restarted, a benchmark's baseline; hadoop_version: daemons of that
        Hadoop release from Maven Central, else the pinned one; java_home: the JDK or JRE the
        daemons run on, and the NodeManagers give their containers, else this one's). Returns
        (state, started); started is False if it was running."""
        if kerberos and ha:
            raise SetupError("--ha and --secure together are not supported yet: choose one")
        if ha and not recovery:
            raise SetupError("an HA pair needs recovery: the standby takes over from the shared state")
        existing = self.load_state()
        if existing is not None:
            alive = [d for d in existing.daemons if d.process() is not None]
            if alive and len(alive) == len(existing.daemons):
                definition.check_running_matches(self.workdir, existing, kerberos, ha, hadoop_version)
                return existing, False
            if alive:
                names = ", ".join(sorted(set(d.name for d in existing.daemons) - set(a.name for a in alive)))
                raise SetupError(
                    f"the cluster in {self.workdir} is partly running ({names} stopped); "
                    "run `tony cluster down` first"
                )
        started = time.monotonic()
        version = jars.cluster_version(hadoop_version)
        java = str(jvm.checked_java_home(java_home) if java_home else jvm.java_home())
        lib = jars.ensure_hadoop_jars(version)
        if kerberos:
            secure.preflight()  # before anything starts: say what to install, fetch libhadoop.so
        state = self._configure(version, lib, kerberos, ha, recovery)
        state.java_home = java
        self._save_state(state)
        try:
            self._start_daemons(state)
            self._save_state(state)
            self._wait_ready(state, deadline=time.monotonic() + timeout)
            if state.kerberos:
                secure.prepare_hdfs(state.kerberos, state.conf_dir, state.lib_dir)
        except BaseException:
            self.down()
            raise
        state.up_seconds = round(time.monotonic() - started, 2)
        self._save_state(state)
        return state, True

    def _configure(self, version: str, lib: Path, kerberos: bool = False, ha: bool = False,
                   recovery: bool = True) -> ClusterState:
        data = self.workdir / "data"
        conf = self.workdir / "conf"
        (self.workdir / "logs").mkdir(parents=True, exist_ok=True)
        data.mkdir(parents=True, exist_ok=True)
        availability.forget_running_state(data)
        (data / "resourcemanager").mkdir(exist_ok=True)
        # One call: ports released by an earlier call could be handed out again.
        per_nm, per_rm = len(definition.NM_PORT_NAMES), len(availability.RM_ADDRESS_KEYS)
        extra = 1 + per_rm if ha else 0  # ZooKeeper, the second RM
        free = claim_ports(self.workdir, len(definition.PORT_NAMES) + per_nm * len(NODEMANAGERS) + extra)
        ports = dict(zip(definition.PORT_NAMES, free))
        nm_ports = free[len(definition.PORT_NAMES):len(free) - extra]
        ha_plan = None
        if ha:
            zk_port, rm2 = free[-extra], free[-extra + 1:]
            rms = [{"id": "rm1", "host": HOST, **{k: ports[k] for k in availability.RM_ADDRESS_KEYS}},
                   {"id": "rm2", "host": HOST, **dict(zip(availability.RM_ADDRESS_KEYS, rm2))}]
            ha_plan = {"zookeeper": f"{HOST}:{zk_port}", "zk_port": zk_port, "rms": rms}
        discovery, standin = self._gpu_discovery()
        nms = []
        for i, nm in enumerate(NODEMANAGERS, start=1):
            chunk = nm_ports[(i - 1) * per_nm: i * per_nm]
            nms.append({"index": i, "host": HOST, "gpus": nm["gpus"],
                        "gpu_discovery": discovery if nm["gpus"] else None,
                        "gpu_standin": standin and bool(nm["gpus"]),
                        **dict(zip(definition.NM_PORT_NAMES, chunk))})
        values = {
            "nn_host": HOST, "dn_host": HOST, "rm_host": HOST,
            "user": getpass.getuser(),
            "data_dir": str(data),
            "conf_dir": str(conf),
            "lib_dir": str(lib),
            "nm_memory_mb": definition.NM_MEMORY_MB,
            "nm_vcores": definition.NM_VCORES,
            "daemon_properties": "",
            "resourcemanager_properties": availability.resourcemanager_properties(
                str(data), ha_plan and ha_plan["rms"], ha_plan and ha_plan["zookeeper"], recovery),
            "nm_recovery": str(recovery).lower(),
            **(HA_TIMERS if ha else TIMERS).values(),
            **ports,
        }
        krb, properties = secure.plan(self.workdir, getpass.getuser()) if kerberos else (None, secure.INSECURE)
        values.update(properties)
        definition.write_conf_dir(conf, values)
        for nm in nms:
            definition.write_nodemanager_conf(self.workdir / f"conf-nm{nm['index']}", values, nm)
        if ha_plan:
            for rm in ha_plan["rms"]:
                availability.write_resourcemanager_conf(self.workdir / f"conf-{rm['id']}", values, rm)
            availability.write_zookeeper_conf(self.workdir / "conf-zookeeper", HOST, ha_plan["zk_port"],
                                            str(data / "zookeeper"))
        return ClusterState(workdir=str(self.workdir), hadoop_version=version, conf_dir=str(conf),
                            lib_dir=str(lib), ports=ports, nodemanagers=nms, kerberos=krb, ha=ha_plan)

    def _gpu_discovery(self) -> tuple[str, bool]:
        """The nvidia-smi YARN's GPU plugin runs on the GPU NodeManager: this machine's own when
        it works, else the stand-in that reports two devices."""
        if os.environ.get(GPU_MODE_ENV, "auto") != "standin":
            real = shutil.which("nvidia-smi")
            if real:
                try:
                    subprocess.run([real, "-L"], capture_output=True, timeout=20, check=True)
                    return real, False
                except (OSError, subprocess.SubprocessError):
                    pass
        return str(definition.install_standin(self.workdir / "gpu")), True

    def _java_cmd(self, state: ClusterState, daemon: str, conf_dir: str, log_name: str) -> list[str]:
        java = f"{state.java_home or jvm.java_home()}/bin/java"
        cmd = definition.java_command(java, daemon, conf_dir, state.lib_dir, str(self.workdir / "logs"), log_name,
                                      str(self.workdir), getpass.getuser())
        if state.kerberos:
            cmd[1:1] = secure.daemon_jvm_options(state.kerberos, daemon)
        return cmd

    def _daemon_env(self, state: ClusterState, conf_dir: str, path_first: str | None = None) -> dict[str, str]:
        env = dict(os.environ)
        if path_first:  # containers inherit the NodeManager's PATH (yarn.nodemanager.env-whitelist)
            env["PATH"] = f"{path_first}:{env.get('PATH', '')}"
        env["JAVA_HOME"] = state.java_home or str(jvm.java_home())
        env["HADOOP_CONF_DIR"] = conf_dir
        # Containers (started by the NodeManagers) see these through the env whitelist.
        env["HADOOP_HOME"] = str(self.workdir)
        env.pop("CLASSPATH", None)
        env.pop("MALLOC_ARENA_MAX", None)
        env.pop("KRB5_CONFIG", None)
        env.pop("KRB5CCNAME", None)  # a daemon logs in from its keytab, never from a user's ticket cache
        if state.kerberos:
            env["KRB5_CONFIG"] = state.kerberos["krb5_conf"]  # containers get it too (env whitelist)
        return env

    def _format_namenode(self, state: ClusterState) -> None:
        if (Path(state.workdir) / "data" / "namenode" / "current" / "VERSION").exists():
            return
        cmd = self._java_cmd(state, "namenode", state.conf_dir, "namenode-format.log")
        cmd += definition.NAMENODE_FORMAT_ARGS
        log = Path(state.workdir) / "logs" / "namenode-format.log"
        with open(log, "wb") as out:
            rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, env=self._daemon_env(state, state.conf_dir))
        if rc != 0:
            raise SetupError(f"formatting the NameNode failed (exit {rc}); see {log}")

    def _spawn(self, state: ClusterState, name: str) -> None:
        if name == "kdc":
            log = Path(state.workdir) / "logs" / "kdc.log"
            cmd = kdc.fresh_kdc_command(state.kerberos, jars.ensure_kdc_jars(state.hadoop_version), log)
            self._start_process(state, name, cmd, self._daemon_env(state, state.conf_dir))
            return
        daemon = definition.daemon_kind(name)
        nm = next((n for n in state.nodemanagers if f"nodemanager{n['index']}" == name), None)
        conf_dir = own_conf_dir(state, name, nm)
        cmd = self._java_cmd(state, daemon, conf_dir, f"{name}.log")
        if daemon == "zookeeper":
            cmd.append(str(Path(conf_dir) / "zoo.cfg"))
        self._start_process(state, name, cmd, self._daemon_env(state, conf_dir, standin_dir(nm) if nm else None))

    def _start_process(self, state: ClusterState, name: str, cmd: list[str], env: dict[str, str]) -> None:
        log = Path(state.workdir) / "logs" / f"{name}.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
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
        if state.kerberos:
            self._start_kdc(state)
        self._format_namenode(state)
        if state.ha:
            self._start_zookeeper(state)
        for name in ("namenode", "datanode", *state.resourcemanagers):
            self._spawn(state, name)
        for nm in state.nodemanagers:
            self._spawn(state, f"nodemanager{nm['index']}")

    def _start_kdc(self, state: ClusterState) -> None:
        """The KDC first (every daemon logs in at start), then the keytabs cut from its one."""
        self._spawn(state, "kdc")
        daemon = next(d for d in state.daemons if d.name == "kdc")
        kdc.finish_kdc_start(state.kerberos, Path(daemon.log), lambda: daemon.process() is not None)

    def _start_zookeeper(self, state: ClusterState) -> None:
        """ZooKeeper first: an HA RM's elector and state store connect to it as they start."""
        self._spawn(state, "zookeeper")
        zk = next(d for d in state.daemons if d.name == "zookeeper")
        deadline = time.monotonic() + 60
        while not availability.zookeeper_ready(HOST, state.ha["zk_port"]):
            if zk.process() is None or time.monotonic() > deadline:
                raise SetupError(f"ZooKeeper did not start; see {zk.log}")
            time.sleep(0.1)

    def _wait_ready(self, state: ClusterState, deadline: float, only: str | None = None) -> None:
        """Until the cluster serves (HDFS, an active RM, the NodeManagers RUNNING). With `only` (a
        daemon just restarted): fails only if that one dies, and counts only the NodeManagers
        that run, since a test may hold others down meanwhile."""
        webs = state.rm_webs
        rm = (lambda: availability.active_rm_web(webs)) if state.ha else state.rm_web
        daemons = [d for d in state.daemons if only is None or d.name == only]
        nms = len(state.nodemanagers) if only is None else sum(
            1 for d in state.daemons if d.name.startswith("nodemanager") and d.process() is not None)
        definition.wait_ready(lambda: [d.name for d in daemons if d.process() is None], rm,
                              state.nn_web, nms, deadline, Path(state.workdir) / "logs",
                              secure.web_session(state.kerberos))

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
        self._spawn(state, name)
        self._save_state(state)
        deadline = time.monotonic() + timeout
        nm = next((n for n in state.nodemanagers if f"nodemanager{n['index']}" == name), None)
        if nm is not None:  # the RM may still count the node RUNNING from before: wait for the NM itself
            definition.wait_answering(f"http://{HOST}:{nm['nm_web_port']}/ws/v1/node/info", deadline, name,
                                      secure.web_session(state.kerberos))
        self._wait_ready(state, deadline=deadline, only=name)

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
            kill_all(alive)
            self._kill_container_leftovers()
            state.daemons = []
            self._save_state(state)
        release_ports(self.workdir)
        if purge and self.workdir.exists():
            shutil.rmtree(self.workdir)
        return stopped

    def _kill_container_leftovers(self) -> None:
        """Kill processes of containers the NodeManagers started that outlived their NM: they
        run in their own sessions, in container working dirs under the NM local dirs."""
        ours = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
        containers = re.compile(re.escape(str(self.workdir)) + r"/data/nm\d+/local/usercache/[^/]+/appcache/")
        kill_all([p for p in psutil.process_iter(["cwd"])
               if containers.match(p.info.get("cwd") or "") and p.pid not in ours])
