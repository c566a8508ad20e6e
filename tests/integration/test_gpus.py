"""GPUs on the real local cluster. Its first NodeManager runs YARN's GPU plugin, which discovers
this machine's GPUs with its own nvidia-smi, or, where none answers, two stand-in devices
(minor numbers 0 and 1; docker/hadoop-cluster/gpu/nvidia-smi, which reports 37 % for device 0
and 64 % for device 1). The AM names each task's devices, frees them when a container ends, and
executors report their devices' metrics. The first tests hold on either, each saying what it
proves on the devices it finds: two workers on two different devices needs two of them (the
stand-in's pair, or two real GPUs), so on a machine with one GPU that test is skipped as `gpu`
("needs two GPUs") rather than passing with one worker, which proves nothing about sharing out
devices. The ones marked `gpu` need a real GPU (a PyTorch job on `cuda`) and are skipped, and
listed, where there is none."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
import requests

from support import JOBS, PYTHON, ROOT, Background, history_of, probe_records, wait_for

STANDIN_UTILIZATION = {"0": 37.0, "1": 64.0}


def standin(cluster) -> bool:
    return any(nm.get("gpu_standin") for nm in cluster.nodemanagers)


def devices(cluster) -> list[dict]:
    """The GPU node's devices as YARN's GPU plugin discovered them."""
    node = next(n for n in cluster.nodes() if n["id"] == cluster.gpu_node_id())
    info = requests.get(f"http://{node['nodeHTTPAddress']}/ws/v1/node/resources/yarn.io%2Fgpu",
                        headers={"Accept": "application/json"}, timeout=10).json()
    return info["gpuDeviceInformation"]["gpus"]


def real_gpu_memory_mib() -> dict[str, float]:
    """{index: total MiB} as this machine's nvidia-smi says."""
    out = subprocess.run(["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    return {line.split(",")[0].strip(): float(line.split(",")[1]) for line in out.strip().splitlines()}


@pytest.fixture
def real_gpus(cluster) -> list[dict]:
    if standin(cluster) or not shutil.which("nvidia-smi"):
        pytest.skip("needs a real NVIDIA GPU: the cluster's GPU node uses the stand-in nvidia-smi here")
    return devices(cluster)


def test_yarn_gpu_plugin_discovered_the_nodes_devices(cluster):
    node = next(n for n in cluster.nodes() if n["id"] == cluster.gpu_node_id())
    info = requests.get(f"http://{node['nodeHTTPAddress']}/ws/v1/node/resources/yarn.io%2Fgpu",
                        headers={"Accept": "application/json"}, timeout=10).json()
    minors = [g["minorNumber"] for g in info["gpuDeviceInformation"]["gpus"]]
    if standin(cluster):
        assert minors == [0, 1]
    else:  # this machine's own, as many as its nvidia-smi lists
        assert len(minors) == len(real_gpu_memory_mib()) > 0
    assert info["assignedGpuDevices"] == []  # the DefaultContainerExecutor assigns nothing: the AM does


def two_devices(request, cluster) -> list[dict]:
    """The GPU node's devices, for a test that needs two workers on two different ones. The
    stand-in always has two; a real machine with a single GPU cannot show two tasks kept apart,
    so there the test is skipped as needing hardware the machine lacks (marked `gpu`, listed)."""
    found = devices(cluster)
    if standin(cluster):
        assert len(found) == 2, found  # docker/hadoop-cluster/gpu/nvidia-smi's pair
    elif len(found) < 2:
        request.node.add_marker(pytest.mark.gpu)
        pytest.skip("needs two GPUs")
    return found


def test_gpu_workers_on_one_node_get_different_devices_and_their_metrics(request, cluster, probe_args, tmp_path):
    """Two workers asking for one GPU each, on the one GPU node: each is given a device of its
    own, and each reports that device's metrics."""
    count = 2
    two_devices(request, cluster)
    release = tmp_path / "release"
    job = Background(cluster, probe_args(f"tony.worker.instances={count}", "tony.worker.gpus=1",
                                         "tony.worker.memory=512m", "tony.ps.instances=1", "tony.ps.memory=512m",
                                         "tony.task.metrics-interval-ms=500", params=f"--until-file {release}"))

    def all_measured():
        status = cluster.am_status(job.app_id) if job.app_id else None
        workers = [t for t in (status or {}).get("tasks", []) if t["type"] == "worker"]
        if len(workers) == count and all(t["metrics"].get("gpu_memory_total_bytes") for t in workers):
            return workers
        return None

    try:  # the tasks run until every worker's GPU metrics were seen
        workers = wait_for(all_measured, 180, "every worker's GPU metrics")
    finally:
        release.touch()
    run = job.wait()
    assert run.rc == 0, run.output[-4000:]
    recs = probe_records(tmp_path)
    visible = {f"worker:{i}": recs[f"worker:{i}"]["all_env"]["CUDA_VISIBLE_DEVICES"] for i in range(count)}
    assert len(set(visible.values())) == count, visible  # each its own: two devices, not one shared
    assert set(visible.values()) <= {str(g["minorNumber"]) for g in devices(cluster)}
    assert recs["worker:0"]["all_env"]["NVIDIA_VISIBLE_DEVICES"] == visible["worker:0"]
    assert "CUDA_VISIBLE_DEVICES" not in recs["ps:0"]["all_env"]  # asked for none: given none
    memory = None if standin(cluster) else real_gpu_memory_mib()
    for t in workers:
        device = visible[t["name"]]
        assert t["node_id"] == cluster.gpu_node_id() and t["gpus"] == [device]
        if memory is None:  # the stand-in's fixed readings, device by device
            assert t["metrics"]["gpu_utilization"] == STANDIN_UTILIZATION[device]
            assert t["metrics"]["MAX_GPU_UTILIZATION"] == STANDIN_UTILIZATION[device]
            assert t["metrics"]["gpu_memory_total_bytes"] == 16384 * 2**20
        else:  # a real device's: its own total, a utilization if the device reports one
            assert t["metrics"]["gpu_memory_total_bytes"] == int(memory[device] * 2**20)
            assert 0 <= t["metrics"].get("gpu_utilization", 0) <= 100


def test_a_task_beyond_the_devices_waits_for_a_free_one_and_gets_it(cluster, probe_args, tmp_path):
    # FCFS: each task starts when it gets its container; one more worker than the node has GPUs
    # runs only once one of the others ended, on the device that freed
    count = len(devices(cluster))
    run = Background(cluster, probe_args(f"tony.worker.instances={count + 1}", "tony.worker.gpus=1",
                                         "tony.worker.memory=512m", "tony.application.distributed-mode=FCFS",
                                         params="--sleep *:4")).wait()
    assert run.rc == 0, run.output[-4000:]
    recs = probe_records(tmp_path)
    order = sorted(recs.values(), key=lambda r: r["started_at"])
    first, last = order[:count], order[count]
    assert sorted(r["all_env"]["CUDA_VISIBLE_DEVICES"] for r in first) == sorted(str(g["minorNumber"])
                                                                                 for g in devices(cluster))
    assert last["all_env"]["CUDA_VISIBLE_DEVICES"] in {r["all_env"]["CUDA_VISIBLE_DEVICES"] for r in first}
    assert last["started_at"] >= min(r["ended_at"] for r in first) - 0.5  # it waited for a device


# ---- a real GPU ---------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_a_pytorch_job_trains_on_the_gpu_yarn_granted(cluster, real_gpus, tmp_path):
    """yarn.io/gpu=1 from YARN's GPU plugin, the device in CUDA_VISIBLE_DEVICES, PyTorch training
    on `cuda` there, and the device's memory and utilization in the job's history."""
    out = tmp_path / "cuda"
    run = Background(cluster, ["--src_dir", str(JOBS), "--executes", "cuda_train.py", "--python_binary_path", PYTHON,
                               "--task_params", f"--out {out} --seconds 8",
                               "--conf", "tony.application.framework=pytorch", "--conf", "tony.am.memory=512m",
                               "--conf", "tony.worker.instances=1", "--conf", "tony.worker.gpus=1",
                               "--conf", "tony.worker.memory=4g", "--conf", "tony.task.metrics-interval-ms=500"]).wait(
        timeout=600)
    assert run.rc == 0, run.output[-4000:]
    record = json.loads((out / "worker:0.json").read_text())
    assert record["cuda_available"] and record["device_count"] == 1  # only the granted device is visible
    assert record["CUDA_VISIBLE_DEVICES"] in {str(g["minorNumber"]) for g in real_gpus}
    assert record["loss_last"] < record["loss_first"]  # it trained, on the GPU
    history = history_of(cluster, run.app_id)
    [task] = [t for t in history["tasks"] if t["name"] == "worker:0"]
    metrics = task["metrics"]
    assert metrics["MAX_GPU_FB_MEMORY_USAGE"] > 0, metrics  # its tensors, in the device's memory
    if "MAX_GPU_UTILIZATION" in metrics:  # (a device that reports utilization)
        assert metrics["MAX_GPU_UTILIZATION"] > 0, metrics
    # the advice's GPU heuristic on a GPU really used: nothing to say (its trigger, GPUs a job never
    # touched, is tests/integration/test_advice.py's, on a real GPU too)
    advice = subprocess.run([PYTHON, "-m", "tony_py.cli", "advise", run.app_id, "--json"], cwd=ROOT, env=cluster.env(),
                            capture_output=True, text=True, timeout=120)
    assert advice.returncode == 0, advice.stderr[-2000:]
    findings = json.loads(advice.stdout)["findings"]
    assert [f for f in findings if f["heuristic"] == "gpus"] == [], findings
    print(f"[gpu] {record['device_name']}: {json.dumps({k: v for k, v in metrics.items() if 'GPU' in k})}; "
          f"advice: {[(f['heuristic'], f['suggestion']['key'], f['suggestion']['value']) for f in findings]}")
