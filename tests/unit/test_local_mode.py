"""Local mode (`tony submit --local`, `api.submit(local=True)`): real executors and real task
processes on this machine, the real coordinator and AM server, no YARN, HDFS or JVM. In the
fast tier because it needs no cluster."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from tony_py import api
from tony_py.am.core.gpus import GpuBook, local_devices, visible_devices_env
from tony_py.errors import UsageError
from tony_py.executor.gpus import assigned_to

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
JOBS = ROOT / "tests" / "integration" / "jobs"
STANDIN = ROOT / "docker" / "hadoop-cluster" / "gpu"


@pytest.fixture
def local_env(tmp_path, monkeypatch):
    """Local jobs keep their files under tmp_path; no GPUs unless a test adds some."""
    monkeypatch.setenv("TONY_LOCAL_DIR", str(tmp_path / "local"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi: tests choose their GPUs
    return tmp_path


def tony(env_dir: Path, *args: str, env: dict | None = None, timeout: float = 480) -> subprocess.CompletedProcess:
    # the tony_py under test, not the one the venv's editable install points at (a git worktree).
    # The timeout only bounds a hang (below pytest's 600 s): a torchrun job of 4 processes took
    # 12 s alone, 44 s with 4 copies and 2 busy loops beside it, and once over 120 s in the unit tier
    # under load (bench/unit_under_load.py)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    full = {**os.environ, "PYTHONPATH": path, **(env or {})}
    return subprocess.run([sys.executable, "-m", "tony_py.submit", "--local", *args], capture_output=True, text=True,
                          timeout=timeout, env=full, cwd=env_dir)


def probe(tmp_path: Path, *conf: str, params: str = "", framework: str = "pytorch") -> list[str]:
    out = ["--src_dir", str(JOBS), "--executes", "probe.py", "--python_binary_path", sys.executable,
           "--task_params", f"--out {tmp_path / 'probe'} {params}".strip(),
           "--conf", f"tony.application.framework={framework}"]
    for c in conf:
        out += ["--conf", c]
    return out


def records(tmp_path: Path) -> dict[str, dict]:
    return {p.stem: json.loads(p.read_text()) for p in (tmp_path / "probe").glob("*.json")}


def no_task_processes_left(tmp_path: Path, grace_s: float = 30.0, out: str = "probe") -> list:
    """Task processes of this test still alive (not zombies) after a grace for exits in flight (it
    returns as soon as none is left; the grace only bounds a loaded machine's reaping)."""
    marker = str(tmp_path / out)
    deadline = time.monotonic() + grace_s
    while True:
        left = [p for p in psutil.process_iter(["cmdline", "status"])
                if marker in " ".join(p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


# ---- jobs -------------------------------------------------------------------------------------------
def test_a_local_job_gets_the_clusters_env_contract(local_env):
    # the workers end only once ps:0 has written its record: the untracked ps is stopped when they end
    run = tony(local_env, *probe(local_env, "tony.worker.instances=2", "tony.ps.instances=1", params="--after-record ps:0"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "finished: SUCCEEDED" in run.stdout and "YARN" not in run.stdout.splitlines()[-2]
    recs = records(local_env)
    assert set(recs) == {"worker:0", "worker:1", "ps:0"}
    assert {recs[f"worker:{i}"]["RANK"] for i in (0, 1)} == {"0", "1"}
    assert recs["worker:0"]["WORLD_SIZE"] == "2" and recs["worker:0"]["MASTER_ADDR"] == "127.0.0.1"
    assert recs["worker:0"]["JOB_ID"].startswith("local_") and recs["ps:0"]["TASK_NUM"] == "2"  # tracked tasks
    assert recs["worker:1"]["all_env"]["CUDA_VISIBLE_DEVICES"] == ""  # asked for no GPU: sees none
    secret = next((local_env / "local").glob("local_*/containers/*/tony-secret"), None)
    assert all(r["TONY_APP_SECRET"] is None and "tony-secret" not in r["cwd_files"] for r in recs.values())
    assert secret is None  # whoever read it removed its link, as on a cluster
    logs = next((local_env / "local").glob("local_*")) / "logs"
    assert len(list(logs.glob("*/executor.log"))) == 3
    assert not no_task_processes_left(local_env)


def test_a_local_failure_names_the_task_its_exit_and_stderr(local_env):
    run = tony(local_env, *probe(local_env, "tony.worker.instances=2", params="--fail worker:0:3"))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "worker:0" in run.stdout and "exit code 3" in run.stdout, run.stdout
    assert "failing on purpose with exit code 3" in run.stdout  # the tail of its stderr
    assert not no_task_processes_left(local_env)


def test_local_gang_restart_in_place(local_env):
    run = tony(local_env, *probe(local_env, "tony.worker.instances=2", "tony.am.retry-count=1",
                                 "tony.application.retryable-exit-codes=3",
                                 params="--fail worker:0:3 --once --after-end worker:0"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "restart 1 of 1" in run.stdout
    recs = records(local_env)
    assert recs["worker:0"]["TONY_RESTART_ATTEMPT"] == "1" and recs["worker:1"]["TONY_RESTART_ATTEMPT"] == "1"
    for rec in recs.values():  # what torchrun would give an elastic script: the gang attempt, the job
        env = rec["all_env"]
        # the most restarts: tony.am.retry-count (1) + tony.application.max-infrastructure-restarts (10)
        assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("1", "11")
        assert env["TORCHELASTIC_RUN_ID"] == rec["JOB_ID"]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_local_torchrun_two_tasks_of_two_processes(local_env):
    """tony.worker.nproc-per-node=2: each task runs its script under torchrun; an unmodified DDP
    script sees a world of 4 in 2 groups of 2, and every process the same rendezvous id."""
    out = local_env / "ranks"
    run = tony(local_env, "--src_dir", str(JOBS), "--executes", "torchrun_ddp.py", "--python_binary_path",
               sys.executable, "--task_params", f"--out {out}", "--conf", "tony.application.framework=pytorch",
               "--conf", "tony.worker.instances=2", "--conf", "tony.worker.nproc-per-node=2")
    assert run.returncode == 0, run.stdout + run.stderr
    recs = [json.loads(p.read_text()) for p in out.glob("rank-*.json")]
    assert sorted(r["rank"] for r in recs) == [0, 1, 2, 3]
    by_task = {}
    for r in recs:
        by_task.setdefault(r["CONTAINER_ID"], []).append(r)
    assert len(by_task) == 2
    for group in by_task.values():
        assert sorted(r["local_rank"] for r in group) == [0, 1] and len({r["GROUP_RANK"] for r in group}) == 1
    assert {r["TORCHELASTIC_RUN_ID"] for r in recs} == {f"{recs[0]['JOB_ID']}-0"}
    assert {r["TORCHELASTIC_RESTART_COUNT"] for r in recs} == {"0"} and not any(r["INIT_METHOD"] for r in recs)
    assert all(f"/{r['CONTAINER_ID']}/tony-torchrun/" in r["TORCHELASTIC_ERROR_FILE"] for r in recs)  # not /tmp
    assert not no_task_processes_left(local_env, out="ranks")  # torchrun's workers left its process group


def test_local_gpus_are_handed_out_one_device_per_task(local_env):
    env = {"PATH": f"{STANDIN}:/usr/bin:/bin"}  # the stand-in lists two devices; metrics come from it too
    run = tony(local_env, *probe(local_env, "tony.worker.instances=2", "tony.worker.gpus=1", "tony.ps.instances=1",
                                 params="--after-record ps:0"), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    recs = records(local_env)
    devices = sorted(recs[f"worker:{i}"]["all_env"]["CUDA_VISIBLE_DEVICES"] for i in (0, 1))
    assert devices == ["0", "1"]
    assert recs["worker:0"]["all_env"]["NVIDIA_VISIBLE_DEVICES"] == recs["worker:0"]["all_env"]["CUDA_VISIBLE_DEVICES"]
    assert recs["ps:0"]["all_env"]["CUDA_VISIBLE_DEVICES"] == ""


def test_local_gpu_assignment_none_leaves_the_devices_to_the_job(local_env):
    # several tasks sharing one GPU (e.g. DDP on a single device): nothing is assigned or hidden
    env = {"PATH": f"{STANDIN}:/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": "1"}
    run = tony(local_env, *probe(local_env, "tony.worker.instances=2", "tony.gpu.assignment=none"), env=env)
    assert run.returncode == 0, run.stdout + run.stderr
    assert {r["all_env"]["CUDA_VISIBLE_DEVICES"] for r in records(local_env).values()} == {"1"}


def test_local_gpu_metrics_and_the_api(local_env, monkeypatch):
    monkeypatch.setenv("PATH", f"{STANDIN}:/usr/bin:/bin")
    release = local_env / "release"
    with api.submit("probe.py", src_dir=str(JOBS), python_binary_path=sys.executable,
                    task_params=f"--out {local_env / 'probe'} --until-file {release}",
                    conf={"tony.worker.instances": "2", "tony.worker.gpus": "1",
                          "tony.task.metrics-interval-ms": "300"}, local=True) as job:
        seen = {}
        deadline = time.monotonic() + 120
        try:  # the tasks run until both were seen measured
            while len(seen) < 2:
                assert time.monotonic() < deadline, f"GPU metrics of {sorted(seen)} only"
                for t in job.status().tasks:
                    if t.metrics.get("gpu_utilization") is not None:
                        seen[t.name] = (t.gpus, t.metrics["gpu_utilization"], t.metrics.get("MAX_GPU_UTILIZATION"))
                time.sleep(0.2)
            with urllib.request.urlopen(job.tracking_url + "/status.json", timeout=30) as resp:  # the page is up
                assert resp.status == 200
        finally:
            release.touch()
        assert job.wait(timeout=120) == "SUCCEEDED"
        secret = job.port.secret
    # the stand-in reports 37 % on device 0 and 64 % on device 1: each task sees its own
    assert sorted(seen.values()) == [(("0",), 37.0, 37.0), (("1",), 64.0, 64.0)], seen
    # the application's secret reached no task's environment, under any name
    assert len(secret) >= 32
    for name, record in records(local_env).items():
        assert not [k for k, v in record["all_env"].items() if secret in (v or "")], name


# ---- bad input: exit 2, nothing started -------------------------------------------------------------------
@pytest.mark.parametrize("conf,env,words", [
    (["tony.worker.gpus=3", "tony.worker.instances=1"], {"CUDA_VISIBLE_DEVICES": "0,1"},
     "tony.worker.gpus=3: this machine has 2 GPU(s)"),
    (["tony.worker.gpus=1", "tony.worker.instances=3"], {"CUDA_VISIBLE_DEVICES": "0,1"}, "ask for 3 GPUs together"),
    (["tony.worker.gpus=1", "tony.worker.instances=1"], {}, "this machine has 0 GPU(s)"),
    (["tony.docker.enabled=true", "tony.docker.containers.image=x"], {}, "tony.docker.enabled"),
    (["tony.containers.resources=hdfs:///x/y.zip"], {}, "local mode reads local paths only"),
])
def test_local_refusals(local_env, conf, env, words):
    run = tony(local_env, *probe(local_env, *conf), env=env)
    assert run.returncode == 2 and words in run.stderr, run.stderr
    assert not (local_env / "local").exists() or not list((local_env / "local").glob("local_*"))
    assert not (local_env / "probe").exists()


def test_local_cannot_detach(local_env):
    run = tony(local_env, "--detach", *probe(local_env))
    assert run.returncode == 2 and "--detach" in run.stderr


# ---- GPU book -----------------------------------------------------------------------------------------------
def test_gpu_book_lowest_free_per_node_and_release():
    book = GpuBook()
    assert book.assign("n1:1", "c1", 1) == ["0"]
    assert book.assign("n1:1", "c2", 2) == ["1", "2"]
    assert book.assign("n2:1", "c3", 1) == ["0"]  # another node: its own indices
    assert book.assign("n1:1", "c1", 1) == ["0"]  # the same container keeps its devices
    book.release("c1")
    assert book.assign("n1:1", "c4", 1) == ["0"]  # freed when its container ended
    book.record("n1:1", "c5", ["3"])  # what a NodeManager says it assigned
    assert book.assign("n1:1", "c6", 1) == ["4"] and book.of("c5") == ["3"]


def test_gpu_book_with_a_pool_refuses_beyond_it():
    book = GpuBook()
    book.set_pool("local:0", ["2", "5"])
    assert book.assign("local:0", "c1", 1) == ["2"] and book.assign("local:0", "c2", 1) == ["5"]
    with pytest.raises(RuntimeError, match="0 free of 2"):
        book.assign("local:0", "c3", 1)


def test_visible_devices_env():
    assert visible_devices_env(["1", "3"], docker=False) == {"CUDA_VISIBLE_DEVICES": "1,3",
                                                             "NVIDIA_VISIBLE_DEVICES": "1,3"}
    assert visible_devices_env(["1"], docker=True) == {}  # YARN's Docker runtime exposes them itself
    assert visible_devices_env([], docker=False) == {}


def test_local_devices():
    assert local_devices({"CUDA_VISIBLE_DEVICES": "2, 3"}) == ["2", "3"]
    assert local_devices({"CUDA_VISIBLE_DEVICES": "-1"}) == []
    assert local_devices({"PATH": str(STANDIN)}) == ["0", "1"]
    assert local_devices({"PATH": "/nonexistent"}) == []


def test_nodemanager_assignment_json():
    # the shape of Hadoop's NMGpuResourceInfo (NodeManager REST, resources/yarn.io%2Fgpu)
    info = {"gpuDeviceInformation": {"gpus": []}, "totalGpuDevices": [{"index": 0, "minorNumber": 0},
                                                                       {"index": 1, "minorNumber": 1}],
            "assignedGpuDevices": [{"index": 1, "minorNumber": 1, "containerId": "container_1_0001_01_000002"},
                                   {"index": 0, "minorNumber": 0, "containerId": "container_1_0001_01_000003"}]}
    assert assigned_to(info, "container_1_0001_01_000002") == ["1"]
    assert assigned_to(info, "container_1_0001_01_000009") is None
    assert assigned_to({"assignedGpuDevices": []}, "c") is None  # the DefaultContainerExecutor: no assignment
    assert assigned_to({"unexpected": 1}, "c") is None


def test_executor_finds_the_nvidia_smi_yarn_is_configured_with(tmp_path):
    from tony_py.executor.gpus import DISCOVERY_KEY, find_nvidia_smi
    tool_dir = tmp_path / "tools"
    tool_dir.mkdir()
    smi = tool_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\n")
    smi.chmod(0o755)
    conf = tmp_path / "conf"
    conf.mkdir()
    for configured in (str(smi), str(tool_dir)):  # YARN accepts the file or its directory
        (conf / "yarn-site.xml").write_text(
            f"<configuration><property><name>{DISCOVERY_KEY}</name><value>{configured}</value></property></configuration>")
        assert find_nvidia_smi({"HADOOP_CONF_DIR": str(conf), "PATH": "/nonexistent"}) == str(smi)
    (conf / "yarn-site.xml").write_text("<configuration><broken")
    assert find_nvidia_smi({"HADOOP_CONF_DIR": str(conf), "PATH": str(tool_dir)}) == str(smi)  # PATH next
