"""The secure tests' cluster: Kerberos on (tony_py/cluster/secure.py), its own KDC, users alice
and bob, started once for these tests by the same launcher users run (`tony cluster up --secure`)
and stopped after them. Here `cluster` is that cluster as alice (her ticket cache in `env()`), so
the parent conftest's fixtures (`tony`, `probe_args`, the leftover check) work on it unchanged;
the leftover check looks at HDFS as its superuser (WebHDFS would need SPNEGO).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from cluster_start import start_or_say_why
from support import JOBS, PYTHON, ROOT, USER, Cluster
from tony_py.bridge.gateway import ClientGateway
from tony_py.cluster import LocalCluster, secure

TOKEN_RENEW_S = 30
# A task's hdfs:// client (hdfs-native) skips a token within 60 s of its max date, so the set a
# job is submitted with serves its tasks for TOKEN_MAX_S - 60 s, until the AM's first set reaches
# them. With 90 that was 30 s, and a CI run's task read 30 s after the submission and found no
# token it would use: 120 leaves 60 s.
TOKEN_MAX_S = 120
ALICE = secure.principal("alice")
FAST = ["--conf", "tony.am.memory=512m", "--conf", "tony.worker.memory=512m"]


def hdfs_io_args(cluster, base: str, workers: int = 2, params: str = "") -> list[str]:
    """A job of jobs/hdfs_io.py: its tasks read base/input.txt and write base/out with their tokens only."""
    return ["--src_dir", str(JOBS), "--executes", "hdfs_io.py", "--python_binary_path", PYTHON,
            "--task_params", f"{cluster.lib_dir} {base} {params}".strip(),
            "--conf", "tony.application.framework=pytorch",
            "--conf", f"tony.worker.instances={workers}", *FAST]


@contextlib.contextmanager
def environment(**values):
    """os.environ with `values` while a client JVM starts (it reads them once)."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update({k: v for k, v in values.items() if v is not None})
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class SecureCluster(Cluster):
    info: dict = field(default_factory=dict)  # `tony cluster status --json`
    user: str = "alice"
    ccache: Path | None = None
    superuser: ClientGateway | None = None

    def env(self, **extra) -> dict[str, str]:
        base = {"KRB5_CONFIG": self.info["krb5_conf"], "KRB5CCNAME": f"FILE:{self.ccache}"}
        env = super().env(**base)
        env.pop("HADOOP_TOKEN_FILE_LOCATION", None)
        env.update(extra)
        return {k: v for k, v in env.items() if v is not None}

    def gateway(self, principal: str | None = None, keytab: str | None = None, **env) -> ClientGateway:
        """A client JVM in this process: as `principal` from `keytab`, else with env's credentials."""
        env = {"KRB5CCNAME": f"FILE:{self.ccache}", "HADOOP_TOKEN_FILE_LOCATION": None, **env}  # alice by default
        with environment(HADOOP_CONF_DIR=str(self.conf_dir), KRB5_CONFIG=self.info["krb5_conf"], **env):
            return ClientGateway(principal=principal, keytab=keytab)

    def keytab(self, user: str) -> str:
        return self.info["users"][user]["keytab"]

    def kinit(self, user: str, ccache: Path, *extra: str) -> None:
        subprocess.run(["kinit", *extra, "-kt", self.keytab(user), secure.principal(user)], check=True,
                       env=dict(os.environ, KRB5_CONFIG=self.info["krb5_conf"], KRB5CCNAME=f"FILE:{ccache}"),
                       capture_output=True, timeout=30)

    # ---- HDFS, as the superuser ----------------------------------------------------------------
    def hdfs_list(self, path: str) -> list[str]:
        gw = self.superuser
        if not gw.call("look at " + path, gw.fs.exists, path):
            return []
        return [p.rstrip("/").rsplit("/", 1)[-1] for p in gw.call("list " + path, gw.fs.listDirs, path)]

    def staging_dirs(self) -> list[str]:
        return [n for n in self.hdfs_list(f"/user/{self.user}/.tony") if n.startswith("application_")]

    def hdfs_delete(self, path: str) -> None:
        # clean_up names the OS user's home; the staging dirs here are in the Kerberos user's
        path = path.replace(f"/user/{USER}/", f"/user/{self.user}/")
        self.superuser.call("delete " + path, self.superuser.fs.delete, path, True)


@pytest.fixture(scope="package")
def cluster(request, tmp_path_factory) -> SecureCluster:
    # Delegation tokens renewable for 30 s and dead after 120 s (production: a day and a week), so
    # a test job outlives its tokens in a couple of minutes. Every other test here is shorter.
    yield from secure_cluster(request, tmp_path_factory, ROOT / ".test-secure-cluster", SecureCluster,
                              token_lifetimes=(TOKEN_RENEW_S, TOKEN_MAX_S))


def secure_cluster(request, tmp_path_factory, workdir: Path, kind: type, token_lifetimes=None, **handle_fields):
    """Start a secure cluster in workdir (LocalCluster.up's own keywords among handle_fields:
    hadoop_version, java_home), yield its handle (a `kind`) logged in as alice, stop it after."""
    up_kwargs = {k: handle_fields[k] for k in ("hadoop_version", "java_home") if k in handle_fields}
    if token_lifetimes:
        os.environ.update(TONY_CLUSTER_TOKEN_RENEW_S=str(token_lifetimes[0]),
                          TONY_CLUSTER_TOKEN_MAX_S=str(token_lifetimes[1]))
    launcher = LocalCluster(workdir)
    launcher.down(purge=True)  # whatever an aborted earlier session left
    try:
        state, _ = start_or_say_why(f"the secure cluster in {workdir.name}",
                                    lambda: launcher.up(timeout=240, kerberos=True, **up_kwargs), workdir)
    finally:
        for name in ("TONY_CLUSTER_TOKEN_RENEW_S", "TONY_CLUSTER_TOKEN_MAX_S"):
            os.environ.pop(name, None)
    info = launcher.status()
    print(f"\n[secure cluster] up in {state.up_seconds} s: {info.get('daemon_rss_mb')}", file=sys.stderr)
    handle = kind("secure", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir), workdir,
                  state.nodemanagers, info=info, ccache=tmp_path_factory.mktemp("krb") / "alice.ccache",
                  **{k: v for k, v in handle_fields.items() if k not in ("hadoop_version",)})
    handle.kinit("alice", handle.ccache)
    services = info["users"]["alice"]["keytab"].replace("alice.keytab", "services.keytab")
    handle.superuser = handle.gateway(secure.principal("nn"), services)
    handle.http = secure.web_session(launcher.load_state().kerberos)  # its REST API is behind SPNEGO
    yield handle
    handle.superuser.close()
    failed = request.session.testsfailed
    launcher.down(purge=not failed)
    if failed:
        print(f"\n[secure cluster] {failed} test(s) failed: logs kept in {workdir}", file=sys.stderr)


@pytest.fixture
def hdfs_dir(cluster, request):
    """A fresh dir in alice's home with an input file (written as alice), removed after; and a
    client JVM logged in as alice from her keytab."""
    base = f"/user/alice/it-{request.node.name[:40]}-{os.getpid()}"
    gw = cluster.gateway(ALICE, cluster.keytab("alice"))
    try:
        gw.call("mkdir", gw.fs.mkdirs, f"{base}/out", 0o700)
        gw.call("write input", gw.fs.writeText, f"{base}/input.txt", "forty-two\n", 0o600)
        yield base, gw
        gw.call("clean", gw.fs.delete, base, True)
    finally:
        gw.close()
