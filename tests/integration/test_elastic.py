"""Bounded elasticity on the real cluster: a gang with tony.worker.min-instances below its size
loses a NodeManager, YARN cannot place the lost worker's replacement, and after the allocation
timeout the gang goes on with the workers it has, renumbered (RANK, WORLD_SIZE), instead of
failing; the parked worker is asked for again at the next restart."""

from __future__ import annotations

import time

from support import JOBS, PYTHON, Background, history_of, tasks_running, wait_for
from test_failures import nodemanager2_back  # noqa: F401 - the fixture: nodemanager2 runs again afterwards
from test_preemption import FILL_MB, steps


def test_a_lost_node_shrinks_the_gang_to_min_instances_and_it_trains_on(cluster, tmp_path,
                                                                       nodemanager2_back):  # noqa: F811
    # nm1 (the GPU node) holds the AM and the chief (a GPU each) and one 6.5 GB worker; nm2 holds
    # the other worker (two do not fit on one 12 GB node). nm2 dies: its worker cannot be
    # replaced, and the gang goes on without it (the chief is never left out).
    out = tmp_path / "train"
    job = Background(cluster, [
        "--src_dir", str(JOBS), "--executes", "preemptible.py", "--python_binary_path", PYTHON,
        "--task_params", f"--dir {out} --ckpt-every 10",
        "--conf", "tony.application.framework=pytorch",
        "--conf", "tony.chief.instances=1", "--conf", "tony.chief.gpus=1", "--conf", "tony.chief.memory=4g",
        "--conf", "tony.worker.instances=2", "--conf", "tony.worker.min-instances=1",
        "--conf", "tony.worker.memory=6656m", "--conf", "tony.am.memory=512m", "--conf", "tony.am.gpus=1",
        "--conf", "tony.container.allocation.timeout=5000"])
    status = wait_for(lambda: tasks_running(cluster, job), 120, "the chief and both workers to run")
    names = ("chief:0", "worker:0", "worker:1")
    wait_for(lambda: all(len(steps(out, t)) > 5 for t in names), 60, "every task to step")
    gpu_node = cluster.gpu_node_id()
    lost = next(t["name"] for t in status["tasks"] if t["node_id"] != gpu_node)
    survivor = next(t["name"] for t in status["tasks"] if t["name"] not in (lost, "chief:0"))
    assert lost.startswith("worker:") and {r["world"] for r in steps(out, survivor) if "step" in r} == {"3"}

    nodemanager2_back.kill_daemon("nodemanager2")
    killed_at = time.time()
    wait_for(lambda: [r for r in steps(out, survivor) if r["attempt"] >= 1 and "step" in r], 120,
             f"{survivor} to train on in the smaller gang")
    smaller = [r for r in steps(out, survivor) if r["attempt"] >= 1 and "step" in r]
    assert {(r["rank"], r["world"]) for r in smaller} == {("1", "2")}  # renumbered: chief 0, this worker 1
    table = {t["name"]: t for t in cluster.am_status(job.app_id)["tasks"]}
    assert table[lost]["state"] == "PARKED" and table[survivor]["state"] == "RUNNING"
    resumed_s = smaller[0]["t"] - killed_at

    (out / "release").touch()
    run = job.wait(timeout=120)
    assert run.rc == 0, run.output[-4000:]
    assert "PARKED" in run.stdout
    h = history_of(cluster, run.app_id)
    resizes = [e for e in h["events"] if e["kind"] == "RESIZE"]
    assert len(resizes) == 1 and "worker 2 -> 1 (min 1)" in resizes[0]["message"], resizes
    # both budgets: the lost node was the cluster's doing, one gang restart on its budget (the
    # survivor's attempt 1 above), none of the user's
    assert (h["restarts_used"], h["infra_restarts_used"]) == (0, 1), [e["message"] for e in h["events"]
                                                                      if e["kind"] in ("RESTART_DECIDED", "RESIZE")]
    print(f"[elastic] {lost}'s node killed; the gang went on without it {resumed_s:.1f} s later")
