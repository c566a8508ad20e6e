"""Bounded elasticity on the real cluster: a gang with tony.worker.min-instances below its size
loses a NodeManager, YARN cannot place the lost worker's replacement, and after the allocation
timeout the gang goes on with the workers it has, renumbered (RANK, WORLD_SIZE), instead of
failing; the parked worker is asked for again at the next restart."""

from __future__ import annotations

import time

from support import JOBS, PYTHON, Background, tasks_running, wait_for
from test_failures import nodemanager2_back  # noqa: F401 - the fixture: nodemanager2 runs again afterwards
from test_preemption import FILL_MB, history, steps


def test_a_lost_node_shrinks_the_gang_to_min_instances_and_it_trains_on(cluster, tmp_path, nodemanager2_back):  # noqa: F811
    out = tmp_path / "train"
    job = Background(cluster, [
        "--src_dir", str(JOBS), "--executes", "preemptible.py", "--python_binary_path", PYTHON,
        "--task_params", f"--dir {out} --ckpt-every 10",
        "--conf", "tony.application.framework=pytorch", "--conf", "tony.worker.instances=2",
        "--conf", "tony.worker.min-instances=1", "--conf", f"tony.worker.memory={FILL_MB}m",
        "--conf", "tony.am.memory=512m", "--conf", "tony.am.gpus=1",  # the AM on nm1, the GPU node
        "--conf", "tony.container.allocation.timeout=5000"])
    status = wait_for(lambda: tasks_running(cluster, job), 120, "both workers to run, one per node")
    wait_for(lambda: all(len(steps(out, t)) > 5 for t in ("worker:0", "worker:1")), 60, "both workers to step")
    gpu_node = cluster.gpu_node_id()
    lost = next(t["name"] for t in status["tasks"] if t["node_id"] != gpu_node)
    survivor = next(t["name"] for t in status["tasks"] if t["name"] != lost)
    assert {r["world"] for r in steps(out, survivor) if "step" in r} == {"2"}

    nodemanager2_back.kill_daemon("nodemanager2")
    killed_at = time.time()
    wait_for(lambda: [r for r in steps(out, survivor) if r["attempt"] >= 1 and "step" in r], 120,
             f"{survivor} to train on alone")
    smaller = [r for r in steps(out, survivor) if r["attempt"] >= 1 and "step" in r]
    assert {(r["rank"], r["world"]) for r in smaller} == {("0", "1")}  # renumbered: the gang of one
    table = {t["name"]: t for t in cluster.am_status(job.app_id)["tasks"]}
    assert table[lost]["state"] == "PARKED" and table[survivor]["state"] == "RUNNING"
    resumed_s = smaller[0]["t"] - killed_at

    (out / "release").touch()
    run = job.wait(timeout=120)
    assert run.rc == 0, run.output[-4000:]
    assert "PARKED" in run.stdout
    h = history(cluster, run.app_id)
    resizes = [e for e in h["events"] if e["kind"] == "RESIZE"]
    assert len(resizes) == 1 and "worker 2 -> 1 (min 1)" in resizes[0]["message"], resizes
    assert h["restarts_used"] == 0  # the lost node was the cluster's doing
    print(f"[elastic] {lost}'s node killed; {survivor} trained on as the gang of one {resumed_s:.1f} s later")
