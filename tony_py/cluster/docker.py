"""The local cluster with every daemon on a host of its own: one Docker container each.

NameNode, DataNode, ResourceManager and N NodeManagers each run in a container with its own
host name (`nm2.<id>.tony.test`) and address on a bridge network of the cluster's own, in the
RFC 2544 test range 198.18.0.0/15, created `--internal` so no traffic leaves this machine.
Configs and JVM command lines are definition.py's, as for the process launcher; the image is
Debian's packages (image.py). What the containers share with this machine, each mounted at the
path it has here so every config and log path means the same inside and out:

- Hadoop's jars (Maven Central, cached by jars.py) and the rendered conf dirs, read-only;
- each daemon's data dir and the log dir, read-write (a NodeManager's container logs and
  working dirs are then readable here, as on the process cluster);
- on NodeManagers, the Python that ran `up` (its prefix and its base interpreter's, read-only):
  a job's Python must exist on every node, as on a real cluster with a shared install. Shipping
  the checkout's 3 GB environment as a zipped venv would cost minutes per job; users with no
  shared install pass --python_venv, which the process cluster tests;
- on NodeManagers, <workdir>/shared, read-write: where jobs of the tests leave what the test
  reads (step logs, records); their checkpoints go to HDFS, as where no directory is shared.

With `up --secure` a KDC container comes first, and every daemon's container also mounts the
realm's krb5.conf (at its own path and at /etc/krb5.conf) and its own host's keytab at
secure.HOST_KEYTAB, the one path the site files name (docs/kerberos.md, across hosts).

Clients on this machine reach the cluster by its host names (hosts.py adds them to /etc/hosts,
as DNS would) and by address. NodeManagers get NET_ADMIN in their own network namespace so
fault tests can drop packets there with iptables (faults.py; netem is not available here).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tony_py import paths
from tony_py.cluster import availability, definition, hosts, image, jars, kdc, native, secure
from tony_py.cluster.engine import check_engine
from tony_py.cluster.definition import overall_state, read_state, save_state
from tony_py.errors import SetupError

from tony_py.cluster.docker_state import (  # noqa: F401 (the names users of this module import from it)
    _ADDRESS, _SHORT, DOMAIN, HA_TIMERS, KIND, NM_PORTS, PORTS, TEST_RANGE, TIMERS, ZK_PORT, DockerClusterState, Node,
    node_addresses)

def docker(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise SetupError(f"docker {' '.join(args[:3])}: {(proc.stderr or proc.stdout).strip()[-400:]}")
    return proc


def python_prefixes() -> list[str]:
    """The running interpreter's installation (and its venv's), for the NodeManagers' containers.
    The image's own /usr is never covered: a system interpreter job uses the image's python3."""
    out = []
    for prefix in dict.fromkeys((sys.base_prefix, sys.prefix)):
        if Path(prefix).resolve() not in (Path("/"), Path("/usr")):
            out.append(str(Path(prefix).resolve()))
    return out


class DockerCluster:
    """Start, stop, inspect and break the Docker cluster whose state lives in `workdir`."""

    kind = KIND

    def __init__(self, workdir: Path | str | None = None):
        self.workdir = Path(workdir or paths.default_cluster_workdir(KIND)).resolve()
        self.state_path = self.workdir / definition.STATE_FILE
        self.cluster_id = hashlib.sha256(str(self.workdir).encode()).hexdigest()[:4]

    def load_state(self) -> DockerClusterState | None:
        return read_state(self.state_path, DockerClusterState)

    # ---- up ----------------------------------------------------------------------------
    def up(self, nodes: int = 3, timeout: float = 240.0, log=print, ha: bool = False,
           kerberos: bool = False, hadoop_version: str | None = None) -> tuple[DockerClusterState, bool]:
        if not 1 <= nodes <= 50:
            raise SetupError(f"--nodes must be 1..50, got {nodes}")
        if kerberos and ha:
            raise SetupError("--ha and --secure together are not supported yet: choose one")
        check_engine()
        existing = self.load_state()
        if existing is not None:
            alive = self._alive(existing)
            if alive and all(alive.values()):
                definition.check_running_matches(self.workdir, existing, kerberos, ha, hadoop_version)
                return existing, False
            if any(alive.values()):
                raise SetupError(f"the cluster in {self.workdir} is partly running; run `tony cluster down` first")
        started = time.monotonic()
        version = jars.cluster_version(hadoop_version)
        lib = jars.ensure_hadoop_jars(version)
        if kerberos:
            secure.preflight()  # before anything starts: say what to install, fetch libhadoop.so
        tag = image.ensure_image(log)
        state = self._configure(version, lib, tag, nodes, ha, kerberos)
        save_state(self.state_path, state)
        try:
            self._create_network(state)
            save_state(self.state_path, state)
            state.hosts_note = hosts.publish(self.cluster_id, {n.hostname: n.address for n in state.nodes})
            if state.kerberos:
                self._start_kdc(state)
            for node in state.nodes:
                if node.name != "kdc":
                    self._run(state, node)
            self.wait_ready(state, time.monotonic() + timeout)
            if state.kerberos:
                secure.prepare_hdfs(state.kerberos, state.conf_dir, state.lib_dir)
        except BaseException:
            self.down()
            raise
        state.up_seconds = round(time.monotonic() - started, 2)
        save_state(self.state_path, state)
        return state, True

    def _configure(self, version: str, lib: Path, tag: str, count: int, ha: bool = False,
                   kerberos: bool = False) -> DockerClusterState:
        data, conf = self.workdir / "data", self.workdir / "conf"
        for sub in ("logs", "shared"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        availability.forget_running_state(data)
        name = f"tony-{self.cluster_id}"
        host = lambda short: f"{short}.{self.cluster_id}.{DOMAIN}"  # noqa: E731
        standin = definition.install_standin(self.workdir / "gpu")
        nms = [{"index": i, "host": host(f"nm{i}"), "gpus": definition.STANDIN_GPUS if i < count or count == 1 else 0,
                **NM_PORTS} for i in range(1, count + 1)]
        for nm in nms:
            nm.update(gpu_discovery=str(standin) if nm["gpus"] else None, gpu_standin=bool(nm["gpus"]))
        masters = ["zookeeper", "namenode", "datanode", "resourcemanager1", "resourcemanager2"] if ha else \
            ["namenode", "datanode", "resourcemanager"]
        if kerberos:
            masters.insert(0, "kdc")
        nodes = [Node(d, f"{name}-{d}", host(_SHORT[d]), "", str(self.workdir / "logs" / f"{d}.log")) for d in masters]
        nodes += [Node(f"nodemanager{nm['index']}", f"{name}-nm{nm['index']}", nm["host"], "",
                       str(self.workdir / "logs" / f"nodemanager{nm['index']}.log")) for nm in nms]
        rm_ports = {k: PORTS[k] for k in availability.RM_ADDRESS_KEYS}
        ha_plan = {"zookeeper": f"{host('zk')}:{ZK_PORT}",
                   "rms": [{"id": rm_id, "host": host(rm_id), **rm_ports} for rm_id in availability.HA_RM_IDS]} \
            if ha else None
        values = {"nn_host": host("nn"), "dn_host": host("dn"), "rm_host": host("rm1" if ha else "rm"),
                  "user": getpass.getuser(), "data_dir": str(data), "conf_dir": str(conf), "lib_dir": str(lib),
                  "nm_memory_mb": definition.NM_MEMORY_MB, "nm_vcores": definition.NM_VCORES,
                  "daemon_properties": "",
                  "resourcemanager_properties": availability.resourcemanager_properties(
                      str(data), ha_plan and ha_plan["rms"], ha_plan and ha_plan["zookeeper"]),
                  "nm_recovery": "true",
                  **(HA_TIMERS if ha else TIMERS).values(), **PORTS, **secure.INSECURE}
        krb = None
        if kerberos:
            daemons = {n.name: (definition.daemon_kind(n.name), n.hostname) for n in nodes if n.name != "kdc"}
            krb, properties = secure.hosts_plan(self.workdir, getpass.getuser(), daemons, host("kdc"),
                                                f"{self.cluster_id}.{DOMAIN}")
            values.update(properties)
        definition.write_conf_dir(conf, values)
        for nm in nms:
            definition.write_nodemanager_conf(self.workdir / f"conf-nm{nm['index']}", values, nm)
            (data / f"nm{nm['index']}").mkdir(parents=True, exist_ok=True)
        if ha_plan:
            for rm in ha_plan["rms"]:
                availability.write_resourcemanager_conf(self.workdir / f"conf-{rm['id']}", values, rm)
            availability.write_zookeeper_conf(self.workdir / "conf-zookeeper", host("zk"), ZK_PORT, str(data / "zookeeper"))
        for d in masters:
            (data / d).mkdir(parents=True, exist_ok=True)
        return DockerClusterState(
            workdir=str(self.workdir), cluster_id=self.cluster_id, hadoop_version=version, conf_dir=str(conf),
            lib_dir=str(lib), image=tag, network=name, subnet="", nodes=nodes, nodemanagers=nms,
            python_mounts=python_prefixes(), shared_dir=str(self.workdir / "shared"), ha=ha_plan, kerberos=krb)

    def _create_network(self, state: DockerClusterState) -> None:
        """A /24 of 198.18.0.0/15 that no other Docker network uses, tried from the cluster id on."""
        docker("network", "rm", state.network, check=False)
        subnets = list(TEST_RANGE.subnets(new_prefix=24))
        first = int(self.cluster_id, 16) % len(subnets)
        for subnet in subnets[first:] + subnets[:first]:
            proc = docker("network", "create", "--internal", "--subnet", str(subnet),
                          "--gateway", str(subnet.network_address + 1), "--label", f"tony-py.cluster={self.cluster_id}",
                          state.network, check=False)
            if proc.returncode == 0:
                state.subnet = str(subnet)
                for node, address in zip(state.nodes, node_addresses(subnet, [n.name for n in state.nodes])):
                    node.address = address
                return
            if "overlap" not in proc.stderr:
                raise SetupError(f"docker network create: {proc.stderr.strip()[-300:]}")
        raise SetupError("every /24 of 198.18.0.0/15 is taken by another Docker network")

    def _mounts(self, state: DockerClusterState, node: Node) -> list[str]:
        krb = state.kerberos
        if node.name == "kdc":  # MiniKdc's jars, and its dir (it writes the keytab there)
            kdc_lib = krb["kdc_lib"]
            logs = self.workdir / "logs"
            return [f"{kdc_lib}:{kdc_lib}:ro", f"{krb['kdc_dir']}:{krb['kdc_dir']}", f"{logs}:{logs}"]
        ro = [state.lib_dir, state.conf_dir]
        rw = [str(self.workdir / "logs")]
        extra = []
        if krb:  # the realm's krb5.conf, also where a host has it (a task's JVM finds it there), and
            # this host's own keytab where the site files say it is
            ro.append(krb["krb5_conf"])
            extra += [f"{krb['krb5_conf']}:/etc/krb5.conf:ro", f"{krb['keytabs'][node.name]}:{secure.HOST_KEYTAB}:ro"]
            if node.name.startswith("nodemanager"):
                ro.append(str(native.lib_dir()))
        if node.name.startswith("nodemanager"):
            index = node.name.removeprefix("nodemanager")
            ro += [str(self.workdir / f"conf-nm{index}"), str(self.workdir / "gpu"), *state.python_mounts]
            rw += [str(self.workdir / "data" / f"nm{index}"), state.shared_dir]
        else:
            rw.append(str(self.workdir / "data" / node.name))
            if self._own_conf(state, node) != state.conf_dir:  # an HA pair's RM, ZooKeeper
                ro.append(self._own_conf(state, node))
        return [f"{p}:{p}:ro" for p in ro] + [f"{p}:{p}" for p in rw] + extra

    def _own_conf(self, state: DockerClusterState, node: Node) -> str:
        """The conf dir a daemon starts with: a NodeManager's, an HA RM's or ZooKeeper's own, else the cluster's."""
        kind = definition.daemon_kind(node.name)
        if kind == "nodemanager":
            return str(self.workdir / f"conf-nm{node.name.removeprefix('nodemanager')}")
        if kind == "resourcemanager" and state.ha:
            return str(self.workdir / f"conf-rm{node.name.removeprefix('resourcemanager')}")
        if kind == "zookeeper":
            return str(self.workdir / "conf-zookeeper")
        return state.conf_dir

    def _command(self, state: DockerClusterState, node: Node) -> list[str]:
        kind = definition.daemon_kind(node.name)
        conf = self._own_conf(state, node)
        java = definition.java_command(f"{image.JAVA_HOME}/bin/java", kind, conf, state.lib_dir,
                                       str(self.workdir / "logs"), Path(node.log).name, str(self.workdir),
                                       getpass.getuser())
        if kind == "zookeeper":
            java.append(f"{conf}/zoo.cfg")
        if state.kerberos:
            java[1:1] = secure.daemon_jvm_options(state.kerberos, kind)
        script = 'exec "$@" >>"$0" 2>&1'
        if kind == "namenode":  # formatted once, in its own container
            version = self.workdir / "data" / "namenode" / "current" / "VERSION"
            script = f'[ -f {version} ] || "$@" {" ".join(definition.NAMENODE_FORMAT_ARGS)} >>"$0" 2>&1; {script}'
        return ["sh", "-c", script, node.log, *java]

    def _start_kdc(self, state: DockerClusterState) -> None:
        """The KDC's container first (every daemon logs in as it starts), bound to its own address,
        then each host's keytab and the users' cut from its one."""
        node = state.node("kdc")
        state.kerberos["kdc_bind"]["address"] = node.address
        state.kerberos["kdc_lib"] = str(jars.ensure_kdc_jars(state.hadoop_version))  # its container mounts it
        java = kdc.fresh_kdc_command(state.kerberos, Path(state.kerberos["kdc_lib"]), Path(node.log),
                                        java=f"{image.JAVA_HOME}/bin/java")
        self._run(state, node, ["sh", "-c", 'exec "$@" >>"$0" 2>&1', node.log, *java])
        kdc.finish_kdc_start(state.kerberos, Path(node.log), lambda: self._alive(state)["kdc"])
        save_state(self.state_path, state)

    def _run(self, state: DockerClusterState, node: Node, command: list[str] | None = None) -> None:
        args = ["run", "-d", "--init", "--name", node.container, "--hostname", node.hostname,
                "--network", state.network, "--ip", node.address, "--label", f"tony-py.cluster={self.cluster_id}",
                "--workdir", str(self.workdir)]
        for other in state.nodes:  # static names, as DNS: a partition must not look like NXDOMAIN
            if other is not node:
                args += ["--add-host", f"{other.hostname}:{other.address}"]
        for mount in self._mounts(state, node):
            args += ["-v", mount]
        conf = self._own_conf(state, node)
        if node.name.startswith("nodemanager"):
            args += ["--cap-add", "NET_ADMIN", "-e", f"PATH={self.workdir / 'gpu'}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
        if state.kerberos:  # containers get it too (the NodeManagers' env whitelist)
            args += ["-e", f"KRB5_CONFIG={state.kerberos['krb5_conf']}"]
        args += ["-e", f"JAVA_HOME={image.JAVA_HOME}", "-e", f"HADOOP_CONF_DIR={conf}",
                 "-e", f"HADOOP_HOME={self.workdir}", state.image, *(command or self._command(state, node))]
        docker("rm", "-f", node.container, check=False)
        docker(*args)

    def wait_ready(self, state: DockerClusterState, deadline: float) -> None:
        # By address: the launcher must not depend on /etc/hosts having taken the names. Behind
        # SPNEGO by name: a token is for a host's HTTP/ principal (the KDC is asked by name anyway).
        where = (lambda node: node.hostname) if state.kerberos else (lambda node: node.address)
        webs = {rm["id"]: f"http://{where(state.node(availability.rm_daemon(rm['id'])))}:{PORTS['rm_web_port']}"
                for rm in (state.ha or {}).get("rms", [])}
        rm = (lambda: availability.active_rm_web(webs)) if webs else \
            f"http://{where(state.node('resourcemanager'))}:{PORTS['rm_web_port']}"
        nn = f"http://{where(state.node('namenode'))}:{PORTS['nn_http_port']}"
        definition.wait_ready(lambda: [n for n, up in self._alive(state).items() if not up], rm, nn,
                              len(state.nodemanagers), deadline, self.workdir / "logs",
                              secure.web_session(state.kerberos))

    # ---- inspect -----------------------------------------------------------------------
    def _inspect(self, state: DockerClusterState) -> dict[str, dict]:
        proc = docker("inspect", *[n.container for n in state.nodes], check=False)
        found = {c["Name"].lstrip("/"): c for c in json.loads(proc.stdout or "[]")}
        return {n.name: found.get(n.container) or {} for n in state.nodes}

    def _alive(self, state: DockerClusterState) -> dict[str, bool]:
        return {name: bool(c.get("State", {}).get("Running")) for name, c in self._inspect(state).items()}

    def status(self) -> dict:
        state = self.load_state()
        if state is None:
            return {"workdir": str(self.workdir), "state": "down", "kind": KIND, "daemons": {}}
        info = self._inspect(state)
        daemons = {}
        for node in state.nodes:
            c = info[node.name]
            daemons[node.name] = {
                "container": node.container, "hostname": node.hostname, "address": node.address,
                "alive": bool(c.get("State", {}).get("Running")), "paused": bool(c.get("State", {}).get("Paused")),
                "connected": state.network in (c.get("NetworkSettings", {}).get("Networks") or {}),
                "pid": c.get("State", {}).get("Pid") or None, "log": node.log}
        overall = overall_state({n: d["alive"] for n, d in daemons.items()})
        out = {"workdir": str(self.workdir), "kind": KIND, "state": overall, "hadoop_version": state.hadoop_version,
               "hadoop_conf_dir": state.conf_dir, "hadoop_lib_dir": state.lib_dir,
               "resourcemanager_web": state.rm_web, "namenode_web": state.nn_web, "default_fs": state.default_fs,
               "image": state.image, "network": state.network, "subnet": state.subnet,
               "python": [f"{p}/bin/python" for p in state.python_mounts[-1:]] + ["/usr/bin/python3"],
               "shared_dir": state.shared_dir, "daemons": daemons,
               "yarn_timers_ms": (HA_TIMERS if state.ha else TIMERS).values(),
               "up_seconds": state.up_seconds, **availability.ha_status(state.rm_webs, state.ha),
               "secure": state.kerberos is not None}
        if state.kerberos:
            out.update(secure.status(state.kerberos))
        if state.hosts_note:
            out["hosts_note"] = state.hosts_note
        if overall != "down":
            out["daemon_rss_mb"] = _rss_mb({n: d["pid"] for n, d in daemons.items() if d["pid"]})
        return out

    # ---- down --------------------------------------------------------------------------
    def down(self, purge: bool = False) -> list[str]:
        state = self.load_state()
        stopped = []
        if state is not None:
            alive = self._alive(state)
            stopped = [n for n, up in alive.items() if up]
            names = [n.container for n in state.nodes]
            docker("rm", "-f", *names, check=False, timeout=180)
            docker("network", "rm", state.network, check=False)
            hosts.withdraw(self.cluster_id)
        if purge and self.workdir.exists():
            shutil.rmtree(self.workdir)
        return stopped


def _rss_mb(pids: dict[str, int]) -> dict[str, float]:
    """Each container's process tree, read from this machine (containers share its kernel)."""
    out = {}
    for name, pid in pids.items():
        try:
            root = psutil.Process(pid)
            out[name] = round(sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20, 1)
        except psutil.Error:
            pass
    out["total"] = round(sum(out.values()), 1)
    return out
