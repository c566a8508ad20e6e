"""Kerberos across real host names: `tony cluster up --docker --secure`, where every daemon is a
container with its own host name, the KDC one of its own, every host has its own principals
(`nn/<host>@TONY.TEST`, `HTTP/<host>@…`) in a keytab of its own, and the site files say `_HOST`.
Users submit from this machine, by keytab and by ticket cache; tasks on the other hosts read and
write HDFS with their delegation tokens only, through a JVM and through tony_py.hdfs (hdfs-native,
by hdfs:/// URLs, which name the NameNode by host), also past their first tokens' end (the
lifetimes are the one-host secure cluster's: 30 s, 120 s), and a worker whose host is killed
resumes on the other from its checkpoint on HDFS; the web UIs, reached by host name, want SPNEGO.

Brought up once for this module by the same launcher users run; it needs a Docker engine (the
multi-host tests' rule: skipped with the reason, failed where TONY_TEST_DOCKER=required, as in CI).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from secure.conftest import TOKEN_MAX_S, TOKEN_RENEW_S, environment
from support import JOBS, PYTHON, ROOT, Background, app_id_in, need_docker_engine, wait_for
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
    # the one-host secure cluster's token lifetimes (secure/conftest.py): a job outlives its first
    # tokens in a minute, so that renewed sets are used across hosts too
    with environment(TONY_CLUSTER_TOKEN_RENEW_S=str(TOKEN_RENEW_S), TONY_CLUSTER_TOKEN_MAX_S=str(TOKEN_MAX_S)):
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


# ---- hdfs:// from task code across hosts (tony_py/hdfs.py) -------------------------------------------
class NameNode:
    """The NameNode's WebHDFS by host name, as alice (SPNEGO with her ticket cache): what the
    tasks wrote, read back by the NameNode itself rather than by the client they used."""

    def __init__(self, hosts: Hosts):
        self.web = hosts.info["namenode_web"]
        self.http = spnego.session(ccache=f"FILE:{hosts.ccache}", krb5_conf=hosts.info["krb5_conf"])

    def listing(self, path: str) -> dict[str, int]:
        """{name: modification time (ms, the NameNode's)}; {} while path does not exist."""
        resp = self.http.get(f"{self.web}/webhdfs/v1{path}", params={"op": "LISTSTATUS"}, timeout=30)
        if resp.status_code == 404:
            return {}
        assert resp.ok, resp.text[:500]
        return {s["pathSuffix"]: s["modificationTime"] for s in resp.json()["FileStatuses"]["FileStatus"]}

    def read(self, path: str) -> bytes:
        resp = self.http.get(f"{self.web}/webhdfs/v1{path}", params={"op": "OPEN"}, timeout=30)
        assert resp.ok, f"{path}: {resp.status_code} {resp.text[:500]}"
        return resp.content


def put_inputs(hosts: Hosts, base: str, tmp_path: Path, rows=(300, 200)) -> int:
    """base/input.txt and a Parquet dataset base/data of `rows` rows (0, 1, ...); returns their sum."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    data = tmp_path / "data"
    data.mkdir()
    for i, n in enumerate(rows):
        start = sum(rows[:i])
        pq.write_table(pa.table({"x": list(range(start, start + n))}), data / f"part-{i}.parquet")
    for args, stdin in ((("-mkdir", "-p", f"{base}/out"), None), (("-put", "-", f"{base}/input.txt"), "forty-two\n"),
                        (("-put", str(data), f"{base}/data"), None)):
        done = hosts.fs(*args, stdin=stdin)
        assert done.returncode == 0, done.stderr[-2000:]
    total = sum(rows)
    return total * (total - 1) // 2


def test_tasks_on_other_hosts_read_hdfs_urls_with_tokens_named_as_the_url_names_the_namenode(hosts, tmp_path):
    """By host name, hdfs-native looks for a token named host:port, while Hadoop names it IP:port:
    the client's copy under host:port (TokenAliases) is what lets the task in; without it, the
    same task holding the same valid token is refused. The AM's renewed sets carry the copy too:
    once the set a task started with no longer lets a new connection in, the renewed one does."""
    base = f"/user/alice/hosts-native-{os.getpid()}"
    expected_sum = put_inputs(hosts, base, tmp_path)
    nn = NameNode(hosts)
    try:
        run = hosts.submit("--principal", ALICE, "--keytab", hosts.info["user_keytab"], "--src_dir", str(JOBS),
                           "--executes", "hdfs_native_io.py", "--python_binary_path", PYTHON,
                           "--task_params", f"{base} --alias-check --outlive-tokens",
                           "--conf", "tony.application.framework=pytorch", "--conf", "tony.worker.instances=2",
                           "--conf", "tony.am.memory=512m", "--conf", "tony.worker.memory=512m")
        assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
        namenode = f"{hosts.info['daemons']['namenode']['hostname']}:{urlsplit(hosts.info['default_fs']).port}"
        nm_hosts = {hosts.info["daemons"][f"nodemanager{i}"]["hostname"] for i in (1, 2)}
        for task in ("worker-0", "worker-1"):
            report = json.loads(nn.read(f"{base}/out/{task}.json"))
            assert report["host"] in nm_hosts and report["token_file"], report
            assert (report["input"], report["sum"], report["owner"]) == ("forty-two", expected_sum, "alice"), report
            assert report["missing"]["type"] == "FileNotFoundError", report["missing"]
            # Hadoop's token (IP:port) and the client's copy under the name the URL uses
            ip_named = [s for s in report["services"] if s != namenode]
            assert namenode in report["services"] and ip_named and ip_named[0][0].isdigit(), report["services"]
            assert report["with_alias"]["out"] == "forty-two", report["with_alias"]
            without = report["without_alias"]
            assert without["rc"] == 3 and without["out"].startswith("PermissionError: "), without
            assert "no credentials for HDFS: no HDFS delegation token" in without["out"], without
            outlived = report["outlived"]
            assert outlived["renewed"] and outlived["old_set"]["rc"] == 3, outlived
            assert (outlived["current_set"]["rc"], outlived["current_set"]["out"]) == (0, "forty-two"), outlived
    finally:
        hosts.fs("-rm", "-r", "-skipTrash", base)


STEPS, EVERY = 40, 5  # hdfs_checkpointer.py: steps of 1 s, a commit every EVERY steps


def test_a_worker_whose_host_is_killed_resumes_on_another_host_from_its_hdfs_checkpoint(hosts):
    """No shared directory: the worker's checkpoints are on HDFS only (jobs/hdfs_checkpointer.py),
    written with its container's tokens. Its host is killed (every process at once, as a power
    cut) once it has committed and stepped on; the copy YARN starts on the other host resumes from
    the newest commit, having redone at most one interval of steps, while no step of the killed
    copy reached HDFS after the new one resumed (no split brain), and the sum over every step
    comes out exact. Whether the AM shared the killed host is YARN's choice: then a second AM
    attempt starts the worker again."""
    from tony_py.cluster.faults import Faults

    base = f"/user/alice/hosts-ckpt-{os.getpid()}"
    nn, faults = NameNode(hosts), Faults(hosts.launcher)
    made = hosts.fs("-mkdir", "-p", f"{base}/out")
    assert made.returncode == 0, made.stderr[-2000:]
    job = Background(hosts, ["--principal", ALICE, "--keytab", hosts.info["user_keytab"], "--src_dir", str(JOBS),
                             "--executes", "hdfs_checkpointer.py", "--python_binary_path", PYTHON,
                             "--task_params", f"{base} --steps {STEPS} --every {EVERY}",
                             "--conf", "tony.application.framework=pytorch", "--conf", "tony.worker.instances=1",
                             "--conf", "tony.am.memory=512m", "--conf", "tony.worker.memory=512m",
                             "--conf", "tony.am.retry-count=2", "--conf", "tony.am.max-attempts=2"])
    killed = None
    try:
        steps = f"{base}/steps/worker-0"
        wait_for(lambda: any(n.endswith("-a0") and int(n[1:].split("-")[0]) >= EVERY + 2 for n in nn.listing(steps)),
                 300, "the worker to step on past its first commit", explain=lambda: "".join(job.out)[-2000:])
        first = json.loads(nn.read(f"{base}/resumed/worker-0-a0"))
        killed = next(name for name, d in hosts.info["daemons"].items() if short(d["hostname"]) == short(first["host"]))
        with_am = short(hosts_app(hosts, job.app_id)["amHostHttpAddress"]) == short(first["host"])
        faults.kill(killed)
        run = job.wait(timeout=600)
    finally:
        if job.proc.poll() is None:  # failed before the job ended: Ctrl-C, so the client kills its application
            job.proc.send_signal(signal.SIGINT)
            job.proc.wait(timeout=60)
        if killed:
            faults.repair()
    assert run.rc == 0, run.output[-3000:]
    resumed = {n: json.loads(nn.read(f"{base}/resumed/{n}")) for n in nn.listing(f"{base}/resumed")}
    later = sorted((r for r in resumed.values() if r["attempt"] > 0), key=lambda r: r["attempt"])
    assert later and short(later[0]["host"]) != short(first["host"]), resumed
    newest = max(int(n[4:].split("-")[0]) for n in nn.listing(f"{base}/ckpt/worker-0") if n.endswith("-a0"))
    assert (later[0]["from_step"], later[0]["from_attempt"]) == (newest, 0), (later[0], newest)
    taken = nn.listing(steps)
    last_before = max(int(n[1:].split("-")[0]) for n in taken if n.endswith("-a0"))
    assert 0 <= last_before - newest <= EVERY, (last_before, newest)  # steps redone: one interval at most
    back_at = nn.listing(f"{base}/resumed")[f"worker-0-a{later[0]['attempt']}"]
    assert all(t < back_at for n, t in taken.items() if n.endswith("-a0")), "a step of the killed copy came later"
    out = json.loads(nn.read(f"{base}/out/worker-0.json"))
    assert (out["step"], out["sum"]) == (STEPS - 1, STEPS * (STEPS - 1) // 2), out
    print(f"\n[hdfs checkpoint across hosts] killed {killed} ({'with' if with_am else 'not'} the "
          f"AM); resumed on {later[0]['host']} from step {newest}, {last_before - newest} step(s) redone",
          file=sys.stderr)
    hosts.fs("-rm", "-r", "-skipTrash", base)


def short(host: str) -> str:
    return host.split(":")[0].split(".")[0]


def hosts_app(hosts: Hosts, app_id: str) -> dict:
    alice = spnego.session(ccache=f"FILE:{hosts.ccache}", krb5_conf=hosts.info["krb5_conf"])
    return alice.get(f"{hosts.info['resourcemanager_web']}/ws/v1/cluster/apps/{app_id}", timeout=10).json()["app"]
