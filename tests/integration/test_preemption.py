"""Preemption on the real cluster: the local cluster's two queues (`default`, `urgent`, equal
shares, preemption on, 5 s from the warning to the kill). A job in `default` fills the cluster;
a job in `urgent` takes one of its containers back. TonY-py relays YARN's warning to the task
(SIGTERM, the deadline in TONY_PREEMPTION_DEADLINE_FILE), the task checkpoints, the gang restarts
from the infrastructure's budget once capacity returns, and resumes from that checkpoint."""

from __future__ import annotations

import json

from support import JOBS, PYTHON, Background, history_of, probe_records, tasks_running, wait_for

FILL_MB = 11 * 1024  # two of these and the AM fill both 12 GB NodeManagers


def steps(out, task) -> list[dict]:
    path = out / "steps" / f"{task}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_preempted_task_is_warned_checkpoints_and_resumes_without_spending_a_retry(cluster, probe_args, tmp_path):
    out = tmp_path / "train"
    low = Background(cluster, [
        "--src_dir", str(JOBS), "--executes", "preemptible.py", "--python_binary_path", PYTHON,
        "--task_params", f"--dir {out} --checkpoint-on-sigterm",
        "--conf", "tony.worker.instances=2", "--conf", f"tony.worker.memory={FILL_MB}m",
        "--conf", "tony.am.memory=512m", "--conf", "tony.yarn.queue=default"])  # tony.am.retry-count: 0
    wait_for(lambda: tasks_running(cluster, low), 120, "the low-priority job's workers to run")
    wait_for(lambda: all(len(steps(out, t)) > 10 for t in ("worker:0", "worker:1")), 60, "both workers to step")

    urgent = Background(cluster, probe_args("tony.worker.instances=1", "tony.worker.memory=6g",
                                            "tony.yarn.queue=urgent", params="--sleep *:3"))
    run = urgent.wait(timeout=180)
    assert run.rc == 0, run.output[-4000:]
    assert cluster.app(run.app_id)["queue"].endswith("urgent") and probe_records(tmp_path)["worker:0"]

    wait_for(lambda: tasks_running(cluster, low, attempt=1), 120, "the low-priority job to resume")
    wait_for(lambda: all(any(s.get("attempt") == 1 and s.get("step") for s in steps(out, t))
                         for t in ("worker:0", "worker:1")), 60, "both workers to step again")
    (out / "release").touch()
    done = low.wait(timeout=120)
    assert done.rc == 0, done.output[-4000:]
    assert "PREEMPTED" in done.stdout  # the client's table said so, not FAILED

    h = history_of(cluster, done.app_id)
    assert h["restarts_used"] == 0 and h["infra_restarts_used"] == 1 and h["preemptions"] == 1, h["message"]
    warnings = [e for e in h["events"] if e["kind"] == "PREEMPTION"]
    assert len(warnings) == 1, warnings
    victim, deadline = warnings[0]["task"], warnings[0]["deadline"]
    ends = [e for e in h["events"] if e["kind"] == "TASK_FINISHED" and e.get("task") == victim]
    assert ends and ends[0]["failure_kind"] == "preempted", ends

    # Every record of the preempted task's first run, in order: it stepped, got SIGTERM with the
    # deadline before YARN's kill, checkpointed that very step, and the next run started from it.
    records = steps(out, victim)
    sigterms = [r for r in records if "sigterm" in r and r["attempt"] == 0]
    assert len(sigterms) == 1, records[-5:]
    warned = sigterms[0]
    # the deadline the task read is its node's clock's (the AM sends what is left, counted from the
    # heartbeat's sending): never after YARN's kill, and about then (not off by an epoch)
    assert warned["checkpointed"] and deadline - 10 < warned["deadline"] <= deadline + 0.01, (warned, deadline)
    assert warned["t"] < deadline
    last_step = max(r["step"] for r in records if r["attempt"] == 0 and "step" in r)
    assert warned["sigterm"] == last_step  # nothing it did was lost
    resumed = [r for r in records if r["attempt"] == 1 and "resumed_from" in r]
    assert [r["resumed_from"] for r in resumed] == [last_step]
    first_after = min(r["step"] for r in records if r["attempt"] == 1 and "step" in r)
    assert first_after == last_step + 1
    print(f"[preemption] SIGTERM {deadline - warned['t']:.2f} s before the kill; steps lost: 0; user retries "
          f"spent: {h['restarts_used']}")
