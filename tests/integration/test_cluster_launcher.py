"""`tony cluster up` twice reports the running cluster; `down` leaves no Hadoop process."""

import json
import subprocess
import sys

import psutil

from tony_py.cluster import LocalCluster


def tony_cluster(*args, timeout=240):
    proc = subprocess.run([sys.executable, "-m", "tony_py.cluster", *args], capture_output=True, text=True,
                          timeout=timeout)
    return proc


def java_processes_under(workdir):
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info.get("cmdline") or [])
        if str(workdir) in cmd:
            found.append(proc.pid)
    return found


def test_up_twice_then_down(tmp_path):
    workdir = tmp_path / "second-cluster"
    try:
        first = tony_cluster("up", "--workdir", str(workdir))
        assert first.returncode == 0, first.stderr
        assert "cluster up in" in first.stdout and "export HADOOP_CONF_DIR=" in first.stdout
        pids = {name: d["pid"] for name, d in LocalCluster(workdir).status()["daemons"].items()}
        assert sorted(pids) == ["datanode", "namenode", "nodemanager1", "nodemanager2", "resourcemanager"]
        assert len(set(pids.values())) == 5

        second = tony_cluster("up", "--workdir", str(workdir))
        assert second.returncode == 0, second.stderr
        assert "already running" in second.stdout
        assert {n: d["pid"] for n, d in LocalCluster(workdir).status()["daemons"].items()} == pids

        status = tony_cluster("status", "--workdir", str(workdir), "--json")
        info = json.loads(status.stdout)
        assert status.returncode == 0 and info["state"] == "running"
        assert info["daemon_rss_mb"]["total"] < 4096
    finally:
        down = tony_cluster("down", "--workdir", str(workdir))
    assert down.returncode == 0
    assert java_processes_under(workdir) == []
    after = tony_cluster("status", "--workdir", str(workdir), "--json")
    assert after.returncode == 3 and json.loads(after.stdout)["state"] == "down"
