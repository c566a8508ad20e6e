"""`tony logs` on the secure cluster, whose NodeManagers aggregate logs with Hadoop's native library
(tony_py/cluster/native.py). SecureIOUtils then reads a job's log files only if the job's owner
owns them; under the DefaultContainerExecutor the NodeManagers' OS user owns them all. Here the
daemons' principals map to that user (auth_to_local), alice and bob to themselves: a job of the
NameNode's principal gets its logs back, alice's is refused, and `tony logs` says why."""

from __future__ import annotations

import getpass
import os
import subprocess
import time

from support import PYTHON, ROOT, wait_for
from tony_py.cluster import secure

NN = secure.principal("nn")


def tony_cli(cluster, *args, **env) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-m", "tony_py.cli", *args], env=cluster.env(**env), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def aggregated_nodes(cluster, app_id: str, owner: str, timeout: float = 120) -> list[str]:
    """The node files in the app's aggregated-log dir (read as the HDFS superuser), once the RM
    says every node is done aggregating."""
    deadline = time.monotonic() + timeout
    while (status := cluster.app(app_id).get("logAggregationStatus")) != "SUCCEEDED":
        assert time.monotonic() < deadline, f"{app_id}: logs not aggregated in {timeout:.0f} s ({status})"
        time.sleep(1)
    su = cluster.superuser
    return su.json("list", su.bridge.aggregatedLogNodes, app_id, owner)


def nodemanagers_alive(cluster) -> bool:
    return sum(n["state"] == "RUNNING" for n in cluster.nodes()) == len(cluster.nodemanagers)


def test_logs_come_back_for_a_job_of_the_nodemanagers_own_user(cluster, tony, probe_args, tmp_path):
    """The NameNode's principal maps to the daemons' OS user, who owns the container logs."""
    services = cluster.keytab("alice").replace("alice.keytab", "services.keytab")
    ccache = tmp_path / "nn.cc"
    subprocess.run(["kinit", "-kt", services, NN], check=True, capture_output=True, timeout=30,
                   env=dict(os.environ, KRB5_CONFIG=cluster.info["krb5_conf"], KRB5CCNAME=f"FILE:{ccache}"))
    run = tony(*probe_args("tony.worker.instances=1"), env={"KRB5CCNAME": f"FILE:{ccache}"})
    assert run.rc == 0, run.output[-3000:]
    owner = getpass.getuser()
    assert cluster.app(run.app_id)["user"] == owner
    nodes = aggregated_nodes(cluster, run.app_id, owner)
    assert nodes and not any(n.endswith(".tmp") for n in nodes), nodes
    shown = tony_cli(cluster, "logs", run.app_id, KRB5CCNAME=f"FILE:{ccache}")
    assert shown.returncode == 0, shown.stderr[-2000:]
    assert "probe worker:0 started" in shown.stdout and "probe worker:0 done" in shown.stdout, shown.stdout
    am = tony_cli(cluster, "logs", run.app_id, "--file", "am", KRB5CCNAME=f"FILE:{ccache}")
    assert am.returncode == 0 and "python AM exited" in am.stdout, am.stderr[-2000:]
    assert nodemanagers_alive(cluster)


def test_logs_of_another_users_job_are_refused_with_the_reason_and_the_remedy(cluster, tony, probe_args, tmp_path):
    """alice's job: its logs belong to the daemons' OS user, so the NodeManager refuses them while
    it runs and aggregates none after; `tony logs` says so in one line, exit 1, both times."""
    release = tmp_path / "release"  # the task runs until `tony logs` has been asked while it runs
    run = tony(*probe_args("tony.worker.instances=1", params=f"--until-file {release}"), "--detach")
    assert run.rc == 0 and run.app_id, run.output[-2000:]
    try:
        wait_for(lambda: any((d / "attempt-0.stdout").exists() for d in cluster.container_dirs(run.app_id)), 300,
                 "the task to start")
        running = tony_cli(cluster, "logs", run.app_id)
        assert cluster.app(run.app_id)["state"] == "RUNNING"  # it was read while the job ran
    finally:
        release.touch()
    wait = subprocess.run([PYTHON, "-c", f"from tony_py import api; j = api.attach({run.app_id!r}); "
                                         "print(j.wait(timeout=240)); j.close()"],
                          env=cluster.env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert wait.stdout.strip().endswith("SUCCEEDED"), wait.stdout + wait.stderr
    assert aggregated_nodes(cluster, run.app_id, "alice") == []  # every file refused, so no node kept its upload
    finished = tony_cli(cluster, "logs", run.app_id)
    for result, says in ((running, "refuses to read it"), (finished, "YARN aggregated none of the job's logs")):
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 1 and len(lines) == 1, result.stderr[-2000:]
        assert says in lines[0] and "job's owner (alice)" in lines[0], lines[0]
        assert "LinuxContainerExecutor" in lines[0] and result.stdout == ""
    assert nodemanagers_alive(cluster)  # a refused file does not take a NodeManager down
