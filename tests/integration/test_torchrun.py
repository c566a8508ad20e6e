"""PyTorch the way its examples run: tony.worker.nproc-per-node=2 runs each task's script under
torchrun, and an unmodified DDP script (jobs/torchrun_ddp.py) finds a world of 2 tasks × 2
processes on the real cluster, on CPU with gloo."""

import json

from support import JOBS, PYTHON

# torchrun's agent and two workers, each with torch imported, hold about 2.1 GB resident
# together (measured with torch 2.15 on CPU), and the NodeManagers check physical memory.
MEMORY = "3g"


def test_two_tasks_of_two_torchrun_processes_train_with_ddp(tony, cluster, tmp_path):
    out = tmp_path / "ranks"
    run = tony("--src_dir", str(JOBS), "--executes", "torchrun_ddp.py", "--python_binary_path", PYTHON,
               "--task_params", f"--out {out} --local_world_size 2 --world_size 4",
               "--conf", "tony.application.framework=pytorch", "--conf", "tony.am.memory=512m",
               "--conf", "tony.worker.instances=2", "--conf", "tony.worker.nproc-per-node=2",
               "--conf", f"tony.worker.memory={MEMORY}", timeout=240)
    assert run.rc == 0, run.output[-4000:]
    assert "finished: SUCCEEDED" in run.stdout
    recs = [json.loads(p.read_text()) for p in sorted(out.glob("rank-*.json"))]
    assert sorted(r["rank"] for r in recs) == [0, 1, 2, 3], recs
    assert all(r["WORLD_SIZE"] == "4" and r["LOCAL_WORLD_SIZE"] == "2" and r["rank_sum"] == 6 for r in recs)
    # two containers (the two tasks), each a torchrun "node" with local ranks 0 and 1 and one group rank
    by_container: dict[str, list[dict]] = {}
    for r in recs:
        by_container.setdefault(r["CONTAINER_ID"], []).append(r)
    assert len(by_container) == 2 and all(c.startswith("container_") for c in by_container)
    for group in by_container.values():
        assert sorted(r["local_rank"] for r in group) == [0, 1]
        assert len({r["GROUP_RANK"] for r in group}) == 1 and len({r["pid"] for r in group}) == 2
    assert sorted({r["GROUP_RANK"] for r in recs}) == ["0", "1"]
    assert {(r["JOB_NAME"], r["TASK_INDEX"]) for r in recs} == {("worker", "0"), ("worker", "1")}
    # torchrun's own variables, not TonY-py's: one rendezvous id for the gang attempt, no restarts of
    # its own (the gang restart is TonY-py's), and its own master port beside the rendezvous port
    assert {r["TORCHELASTIC_RUN_ID"] for r in recs} == {f"{run.app_id}-0"}
    assert {(r["TORCHELASTIC_RESTART_COUNT"], r["TORCHELASTIC_MAX_RESTARTS"]) for r in recs} == {("0", "0")}
    assert {r["TONY_RESTART_ATTEMPT"] for r in recs} == {"0"} and {r["JOB_ID"] for r in recs} == {run.app_id}
    assert len({(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in recs}) == 1
    endpoint = recs[0]["TONY_TORCHRUN_RDZV_ENDPOINT"]
    assert recs[0]["MASTER_PORT"] != endpoint.rsplit(":", 1)[1]
    assert not any(r["INIT_METHOD"] or r["WORLD"] for r in recs)  # TonY's one-rank-per-task values are not set
    logs = cluster.task_logs(run.app_id)
    assert sorted(logs) == ["worker:0", "worker:1"]
    for files in logs.values():
        assert "torchrun_ddp.py under torchrun" in files["executor.log"]
        assert files["attempt-0.stdout"].count(": done") == 2  # both of its processes, in the task's own log
    # torchrun's files stay in the container's working dir (YARN removes it), not in /tmp
    assert all(f"/{r['CONTAINER_ID']}/tony-torchrun/" in r["TORCHELASTIC_ERROR_FILE"] for r in recs)
