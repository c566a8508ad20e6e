"""Kerberos across real host names: `tony cluster up --docker --secure`, where every daemon is a
container with its own host name, the KDC one of its own, every host has its own principals
(`nn/<host>@TONY.TEST`, `HTTP/<host>@…`) in a keytab of its own, and the site files say `_HOST`.
Users submit from this machine, by keytab and by ticket cache; tasks on the other hosts read and
write HDFS with their delegation tokens only; the web UIs, reached by host name, want SPNEGO.

Brought up once for this module by the same launcher users run; it needs a Docker engine (the
multi-host tests' rule: skipped with the reason, failed where TONY_TEST_DOCKER=required, as in CI).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from support import JOBS, PYTHON, ROOT, app_id_in, need_docker_engine
from tony_py import spnego
from tony_py.cluster import secure
from tony_py.cluster.docker import DockerCluster

ALICE = secure.principal("alice")


class Hosts:
    """The secure Docker cluster as alice sees it from this machine."""

    def __init__(self, launcher: DockerCluster, info: dict, ccache: Path):
        self.launcher, self.info, self.ccache = launcher, info, ccache
        self.conf_dir, self.lib_dir = info["hadoop_conf_dir"], info["hadoop_lib_dir"]

    def env(self, **extra) -> dict[str, str]:
        env = dict(os.environ, HADOOP_CONF_DIR=self.conf_dir, KRB5_CONFIG=self.info["krb5_conf"],
                   KRB5CCNAME=f"FILE:{self.ccache}")
        env.pop("HADOOP_TOKEN_FILE_LOCATION", None)
        env.pop("TONY_CONF_DIR", None)
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}

    def fs(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        """`hdfs dfs ARGS` from this machine, as alice (her ticket cache), `stdin` its input."""
        return subprocess.run(["java", "-Xmx192m", f"-Djava.security.krb5.conf={self.info['krb5_conf']}", "-cp",
                               f"{self.conf_dir}:{self.lib_dir}/*", "org.apache.hadoop.fs.FsShell", *args],
                              input=stdin, capture_output=True, text=True, timeout=120, env=self.env())

    def submit(self, *args: str, **env) -> subprocess.CompletedProcess:
        return subprocess.run([PYTHON, "-m", "tony_py.submit", *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=400, env=self.env(**env))


@pytest.fixture(scope="module")
def hosts(request, tmp_path_factory) -> Hosts:
    need_docker_engine("the secure multi-host cluster")
    workdir = ROOT / ".test-secure-hosts-cluster"
    launcher = DockerCluster(workdir)
    launcher.down(purge=True)
    state, _ = launcher.up(nodes=2, kerberos=True, timeout=300)
    info = launcher.status()
    print(f"\n[secure hosts cluster] up in {state.up_seconds} s: {info.get('daemon_rss_mb')}", file=sys.stderr)
    handle = Hosts(launcher, info, tmp_path_factory.mktemp("krb-hosts") / "alice.cc")
    subprocess.run(["kinit", "-kt", info["user_keytab"], ALICE], check=True, capture_output=True, timeout=30,
                   env=handle.env())
    failed_before = request.session.testsfailed
    yield handle
    failed = request.session.testsfailed - failed_before
    launcher.down(purge=not failed)
    if failed:
        print(f"\n[secure hosts cluster] {failed} test(s) failed: logs kept in {workdir}", file=sys.stderr)


def keytab_principals(path: str) -> set[str]:
    listing = subprocess.run(["klist", "-k", path], capture_output=True, text=True, timeout=30, check=True).stdout
    return {line.split()[-1] for line in listing.splitlines()[3:] if line.strip()}


def test_every_host_has_its_own_principals_and_the_web_uis_want_spnego_by_host_name(hosts):
    info = hosts.info
    out = subprocess.run([PYTHON, "-m", "tony_py.cluster", "status", "--workdir", str(hosts.launcher.workdir),
                          "--json"], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    status = json.loads(out.stdout)
    assert status["secure"] is True and status["state"] == "running"
    assert status["user_principal"] == ALICE and os.path.isfile(status["user_keytab"])
    kdc = info["daemons"]["kdc"]["hostname"]
    assert status["kdc"] == f"{kdc}:{secure.KDC_PORT}" and os.path.isfile(status["krb5_conf"])
    # Each host's keytab holds its own service principals and nothing of any other host's.
    services = {"namenode": "nn", "datanode": "dn", "resourcemanager": "rm", "nodemanager1": "nm", "nodemanager2": "nm"}
    keytabs = hosts.launcher.load_state().kerberos["keytabs"]
    for daemon, service in services.items():
        host = info["daemons"][daemon]["hostname"]
        assert keytab_principals(keytabs[daemon]) == {f"{service}/{host}@TONY.TEST", f"HTTP/{host}@TONY.TEST"}, daemon
        assert os.stat(keytabs[daemon]).st_mode & 0o077 == 0
    site = Path(hosts.conf_dir, "yarn-site.xml").read_text()
    assert "<value>nm/_HOST@TONY.TEST</value>" in site and "<value>HTTP/_HOST@TONY.TEST</value>" in site
    # The web UIs, by host name (as YARN's links give them): SPNEGO for HTTP/<that host>.
    alice = spnego.session(ccache=f"FILE:{hosts.ccache}", krb5_conf=info["krb5_conf"])
    for url in (f"{info['resourcemanager_web']}/ws/v1/cluster/nodes",
                f"{info['namenode_web']}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo",
                f"http://{info['daemons']['nodemanager2']['hostname']}:8042/ws/v1/node/info"):
        assert requests.get(url, timeout=10).status_code == 401, url
        assert alice.get(url, timeout=10).status_code == 200, url
    nodes = alice.get(f"{info['resourcemanager_web']}/ws/v1/cluster/nodes", timeout=10).json()["nodes"]["node"]
    assert sorted(n["nodeHostName"] for n in nodes) == sorted(
        info["daemons"][f"nodemanager{i}"]["hostname"] for i in (1, 2))


@pytest.mark.parametrize("credentials", ["keytab", "ticket cache"])
def test_submitted_from_this_machine_tasks_on_other_hosts_use_hdfs_with_their_tokens_only(hosts, credentials):
    base = f"/user/alice/hosts-{credentials.replace(' ', '-')}-{os.getpid()}"
    made = hosts.fs("-mkdir", "-p", f"{base}/out")
    assert made.returncode == 0, made.stderr[-2000:]
    put = hosts.fs("-put", "-", f"{base}/input.txt", stdin="forty-two\n")
    assert put.returncode == 0, put.stderr[-2000:]
    login = ["--principal", ALICE, "--keytab", hosts.info["user_keytab"]] if credentials == "keytab" else []
    # With the keytab: no ticket cache at all (one that cannot exist)
    env = {"KRB5CCNAME": "FILE:/nonexistent/cc"} if credentials == "keytab" else {}
    run = hosts.submit(*login, "--src_dir", str(JOBS), "--executes", "hdfs_io.py", "--python_binary_path", PYTHON,
                       "--task_params", f"{hosts.lib_dir} {base}", "--conf", "tony.application.framework=pytorch",
                       "--conf", "tony.worker.instances=2", "--conf", "tony.am.memory=512m",
                       "--conf", "tony.worker.memory=512m", **env)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    app_id = app_id_in(run.stdout + run.stderr)
    for i in range(2):
        text = hosts.fs("-cat", f"{base}/out/worker-{i}.txt")
        assert text.returncode == 0 and text.stdout == f"worker-{i} read forty-two\n", text.stderr[-1000:]
    # The tasks ran on the NodeManagers' hosts, not here: their log links name those hosts.
    shown = subprocess.run([PYTHON, "-m", "tony_py.cli", "history", "show", app_id, "--json"], capture_output=True,
                           text=True, cwd=ROOT, timeout=120, env=hosts.env())
    assert shown.returncode == 0, shown.stderr[-2000:]
    nm_hosts = {hosts.info["daemons"][f"nodemanager{i}"]["hostname"] for i in (1, 2)}
    tasks = json.loads(shown.stdout)["tasks"]
    assert len(tasks) == 2 and all(urlsplit(t["log_url"]).hostname in nm_hosts for t in tasks), tasks
    hosts.fs("-rm", "-r", "-skipTrash", base)
