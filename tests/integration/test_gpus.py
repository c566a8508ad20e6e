"""GPUs on the real local cluster: its first NodeManager runs YARN's GPU plugin, which
discovers two devices (minor numbers 0 and 1) through the stand-in nvidia-smi; the AM names
each task's devices, frees them when a container ends, and executors report their devices'
metrics (the stand-in says 37 % for device 0 and 64 % for device 1)."""

from __future__ import annotations

import requests

from support import Background, probe_records, wait_for


def test_yarn_gpu_plugin_discovered_the_standin_devices(cluster):
    node = next(n for n in cluster.nodes() if n["id"] == cluster.gpu_node_id())
    info = requests.get(f"http://{node['nodeHTTPAddress']}/ws/v1/node/resources/yarn.io%2Fgpu",
                        headers={"Accept": "application/json"}, timeout=10).json()
    gpus = info["gpuDeviceInformation"]["gpus"]
    assert [g["minorNumber"] for g in gpus] == [0, 1]
    assert info["assignedGpuDevices"] == []  # the DefaultContainerExecutor assigns nothing: the AM does


def test_two_gpu_workers_on_one_node_get_different_devices_and_their_metrics(cluster, probe_args, tmp_path):
    job = Background(cluster, probe_args("tony.worker.instances=2", "tony.worker.gpus=1", "tony.worker.memory=512m",
                                         "tony.ps.instances=1", "tony.ps.memory=512m",
                                         "tony.task.metrics-interval-ms=500", params="--sleep *:8"))

    def both_measured():
        status = cluster.am_status(job.app_id) if job.app_id else None
        workers = [t for t in (status or {}).get("tasks", []) if t["type"] == "worker"]
        if len(workers) == 2 and all(t["metrics"].get("gpu_utilization") is not None for t in workers):
            return workers
        return None

    workers = wait_for(both_measured, 180, "both workers' GPU metrics")
    run = job.wait()
    assert run.rc == 0, run.output[-4000:]
    recs = probe_records(tmp_path)
    devices = {name: recs[name]["all_env"]["CUDA_VISIBLE_DEVICES"] for name in ("worker:0", "worker:1")}
    assert sorted(devices.values()) == ["0", "1"], devices
    assert recs["worker:0"]["all_env"]["NVIDIA_VISIBLE_DEVICES"] == devices["worker:0"]
    assert "CUDA_VISIBLE_DEVICES" not in recs["ps:0"]["all_env"]  # asked for none: given none
    gpu_node = cluster.gpu_node_id()
    for t in workers:
        assert t["node_id"] == gpu_node and t["gpus"] == [devices[t["name"]]]
        want = {"0": 37.0, "1": 64.0}[devices[t["name"]]]
        assert t["metrics"]["gpu_utilization"] == want and t["metrics"]["MAX_GPU_UTILIZATION"] == want
        assert t["metrics"]["gpu_memory_total_bytes"] == 16384 * 2**20


def test_a_third_gpu_task_waits_for_a_free_device_and_gets_it(cluster, probe_args, tmp_path):
    # FCFS: each task starts when it gets its container; the node has two GPUs, so the third
    # worker runs only once one of the first two ended, on the device that freed
    run = Background(cluster, probe_args("tony.worker.instances=3", "tony.worker.gpus=1", "tony.worker.memory=512m",
                                         "tony.application.distributed-mode=FCFS", params="--sleep *:4")).wait()
    assert run.rc == 0, run.output[-4000:]
    recs = probe_records(tmp_path)
    order = sorted(recs.values(), key=lambda r: r["started_at"])
    first_two, third = order[:2], order[2]
    assert sorted(r["all_env"]["CUDA_VISIBLE_DEVICES"] for r in first_two) == ["0", "1"]
    assert third["all_env"]["CUDA_VISIBLE_DEVICES"] in ("0", "1")
    assert third["started_at"] >= min(r["ended_at"] for r in first_two) - 0.5  # it waited for a device
