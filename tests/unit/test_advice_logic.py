"""The advice's heuristics (tony_py/advice) on jobs described by hand: each finding's trigger,
the case just beside it that must not trigger, and the suggested value."""

from __future__ import annotations

from pathlib import Path

import pytest

from tony_py.advice import report, thresholds
from tony_py.advice.facts import failures_from_events, from_history, spec_of
from tony_py.advice.model import Finding, JobFacts, TaskFacts
from tony_py.config.layers import load_conf
from tony_py.config.yarnsite import allocation_limits

MB = 1 << 20
T0 = 1_000_000.0


def props(*overrides: str) -> dict[str, str]:
    conf = load_conf(None, ["tony.containers.command=python t.py", "tony.task.metrics-interval-ms=1000", *overrides],
                     env={}, cwd=Path("/nonexistent-cwd"))
    return conf.resolved()


def task(name, *, ran=60.0, start=T0 + 10, state="SUCCEEDED", host="n1", **metrics) -> TaskFacts:
    return TaskFacts(name=name, type=name.split(":")[0], state=state, host=host, started_at=start,
                     finished_at=start + ran, metrics=metrics)


def facts(*conf, tasks=(), failures=(), events=(), status="SUCCEEDED", min_alloc=128, **kw) -> JobFacts:
    spec = spec_of(props(*conf))
    end = max((t.finished_at for t in tasks if t.finished_at), default=T0 + 100)
    return JobFacts(app_id="application_1_0001", spec=spec, status=status, tasks=tuple(tasks), failures=tuple(failures),
                    events=tuple(events), submitted_at=T0, finished_at=end, min_allocation_mb=min_alloc, **kw)


def only(findings: list[Finding], heuristic: str) -> list[Finding]:
    return [f for f in findings if f.heuristic == heuristic]


# ---- memory ---------------------------------------------------------------------------------------------
def test_memory_asked_8g_used_240m_suggests_the_peak_with_headroom_rounded_to_yarns_increment():
    peak = dict(MAX_MEMORY_BYTES=200 * MB, executor_max_rss_bytes=40 * MB)
    job = facts("tony.worker.instances=2", "tony.worker.memory=8g", tasks=[task("worker:0", **peak),
                                                                           task("worker:1", **peak)])
    [f] = only(report.advise(job), "memory")
    assert (f.severity, f.task_type, f.suggestion.key, f.suggestion.value) == ("critical", "worker",
                                                                               "tony.worker.memory", "384m")
    assert "used at most 240 MB" in f.evidence and "8192 MB" in f.evidence
    bigger = facts("tony.worker.instances=1", "tony.worker.memory=8g", tasks=[task("worker:0", **peak)], min_alloc=1024)
    assert only(report.advise(bigger), "memory")[0].suggestion.value == "1g"  # YARN's default increment


def test_memory_near_the_request_or_within_the_grace_or_too_short_to_judge_says_nothing():
    near = facts("tony.worker.instances=1", "tony.worker.memory=512m",
                 tasks=[task("worker:0", MAX_MEMORY_BYTES=300 * MB, executor_max_rss_bytes=40 * MB)])
    assert only(report.advise(near), "memory") == []  # 172 MB unused: under 2 increments of 128
    short = facts("tony.worker.instances=1", "tony.worker.memory=8g",
                  tasks=[task("worker:0", ran=1.5, MAX_MEMORY_BYTES=10 * MB)])
    assert only(report.advise(short), "memory") == []  # under 2 metrics intervals: its peak may be missed


def test_a_task_killed_for_memory_gets_half_as_much_again():
    job = facts("tony.worker.instances=1", "tony.worker.memory=2g", status="FAILED",
                tasks=[task("worker:0", state="FAILED", MAX_MEMORY_BYTES=1900 * MB)],
                failures=[{"task": "worker:0", "kind": "exit_code", "exit_code": -104, "host": "n1"}])
    [f] = only(report.advise(job), "memory")
    assert (f.severity, f.suggestion.value) == ("critical", "3g") and "killed worker:0 for exceeding" in f.evidence


def test_memory_never_below_a_short_tasks_peak_a_ray_nodes_floor_or_over_the_largest_container():
    # worker:1 ran too briefly to be judged alone, but what it used still counts
    mixed = facts("tony.worker.instances=2", "tony.worker.memory=8g",
                  tasks=[task("worker:0", MAX_MEMORY_BYTES=1000 * MB), task("worker:1", ran=1.5, MAX_MEMORY_BYTES=3000 * MB)])
    assert only(report.advise(mixed), "memory")[0].suggestion.value == "3840m"  # 3000 x 1.25, in 128s
    ray = facts("tony.application.framework=ray", "tony.worker.instances=1", "tony.head.memory=8g",
                "tony.worker.memory=4g", tasks=[task("head:0", MAX_MEMORY_BYTES=1200 * MB),
                                               task("worker:0", MAX_MEMORY_BYTES=300 * MB)])
    values = {f.task_type: f.suggestion.value for f in only(report.advise(ray), "memory")}
    assert values == {"head": "2304m", "worker": "768m"}  # the daemons' floors (2192, 656 MB), in 128s
    capped = facts("tony.worker.instances=1", "tony.worker.memory=6g", status="FAILED", max_allocation_mb=8192,
                   tasks=[task("worker:0", state="FAILED")],
                   failures=[{"task": "worker:0", "kind": "exit_code", "exit_code": -104, "host": "n1"}])
    [f] = only(report.advise(capped), "memory")
    assert f.suggestion.value == "8g" and "capped at the cluster's largest container" in f.evidence
    at_most = facts("tony.worker.instances=1", "tony.worker.memory=8g", status="FAILED", max_allocation_mb=8192,
                    tasks=[task("worker:0", state="FAILED")],
                    failures=[{"task": "worker:0", "kind": "exit_code", "exit_code": -104, "host": "n1"}])
    [f] = only(report.advise(at_most), "memory")
    assert f.suggestion.kind == "code" and "largest container is 8192 MB" in f.evidence


def test_what_no_key_of_its_own_sizes_is_not_advised():
    # a single-node job's task runs in the AM's container; Horovod's driver is TonY-py's to size
    single = facts(tasks=[task("driver:0", MAX_MEMORY_BYTES=100 * MB, MAX_CPU_UTILIZATION=50.0)])
    assert [f for f in report.advise(single) if f.heuristic in ("memory", "vcores")] == []
    horovod = facts("tony.application.framework=horovod", "tony.worker.instances=1", "tony.worker.memory=1g",
                    tasks=[task("driver:0", MAX_MEMORY_BYTES=100 * MB), task("worker:0", MAX_MEMORY_BYTES=700 * MB)])
    assert [f.task_type for f in only(report.advise(horovod), "memory")] == ["worker"]  # not the driver


# ---- vcores and GPUs -------------------------------------------------------------------------------------
def test_vcores_a_single_thread_on_two_vcores_gets_one_and_two_busy_cores_keep_theirs():
    job = facts("tony.worker.instances=1", "tony.worker.vcores=2",
                tasks=[task("worker:0", MAX_CPU_UTILIZATION=103.0, AVG_CPU_UTILIZATION=97.0)])
    [f] = only(report.advise(job), "vcores")
    assert (f.suggestion.key, f.suggestion.value) == ("tony.worker.vcores", "1") and "1.03 cores" in f.evidence
    busy = facts("tony.worker.instances=1", "tony.worker.vcores=2",
                 tasks=[task("worker:0", MAX_CPU_UTILIZATION=180.0, AVG_CPU_UTILIZATION=150.0)])
    assert only(report.advise(busy), "vcores") == []


H100 = 81559 * MB  # a device's memory, as the executor reports it


def test_gpus_never_touched_fewer_when_idle_none_when_used():
    untouched = facts("tony.worker.instances=1", "tony.worker.gpus=1",
                      tasks=[task("worker:0", MAX_GPU_UTILIZATION=0.0, MAX_GPU_FB_MEMORY_USAGE=0.2,
                                  gpu_memory_total_bytes=H100)])
    [f] = only(report.advise(untouched), "gpus")
    assert (f.severity, f.suggestion.value) == ("severe", "0") and "163 MB of their memory" in f.evidence
    # a CUDA context and no kernel yet (0.6 % of 80 GB), or a device that reports no utilization
    # ([N/A]): not "never used"
    context = facts("tony.worker.instances=1", "tony.worker.gpus=1",
                    tasks=[task("worker:0", MAX_GPU_UTILIZATION=0.0, MAX_GPU_FB_MEMORY_USAGE=0.6,
                                gpu_memory_total_bytes=H100)])
    no_reading = facts("tony.worker.instances=1", "tony.worker.gpus=1",
                       tasks=[task("worker:0", MAX_GPU_FB_MEMORY_USAGE=0.1, gpu_memory_total_bytes=H100)])
    assert only(report.advise(context), "gpus") == only(report.advise(no_reading), "gpus") == []
    # under torchrun a task's GPUs split evenly between its processes: a multiple of them
    split = facts("tony.application.framework=pytorch", "tony.worker.instances=1", "tony.worker.gpus=4",
                  "tony.worker.nproc-per-node=2",
                  tasks=[task("worker:0", MAX_GPU_UTILIZATION=30.0, AVG_GPU_UTILIZATION=10.0, MAX_GPU_FB_MEMORY_USAGE=40)])
    assert only(report.advise(split), "gpus")[0].suggestion.value == "2"
    idle = facts("tony.worker.instances=1", "tony.worker.gpus=4",
                 tasks=[task("worker:0", MAX_GPU_UTILIZATION=30.0, AVG_GPU_UTILIZATION=10.0, MAX_GPU_FB_MEMORY_USAGE=40)])
    assert only(report.advise(idle), "gpus")[0].suggestion.value == "1"  # 4 x 10 % / 50 %, rounded up
    used = facts("tony.worker.instances=1", "tony.worker.gpus=1",
                 tasks=[task("worker:0", MAX_GPU_UTILIZATION=37.0, AVG_GPU_UTILIZATION=37.0, MAX_GPU_FB_MEMORY_USAGE=6)])
    assert only(report.advise(used), "gpus") == []


# ---- waiting, start-up, stragglers ------------------------------------------------------------------------
def events(*items) -> list[dict]:
    return [{"kind": kind, "ts": T0 + at, **({"task": task} if task else {})} for kind, at, task in items]


def test_a_long_wait_in_the_queue_points_at_a_queue_with_room():
    waited = events(("SUBMITTED", 0, None), ("AM_STARTED", 100, None), ("REQUESTED", 101, None),
                    ("ALLOCATED", 102, "worker:0"), ("SPEC_SERVED", 110, "worker:0"))
    job = facts("tony.worker.instances=1", "tony.worker.memory=1g", events=waited, tasks=[task("worker:0", start=T0 + 110)],
                queues=(("default", 0), ("urgent", 20_000)))
    [f] = only(report.advise(job), "waiting")
    assert (f.suggestion.key, f.suggestion.value) == ("tony.yarn.queue", "urgent") and "100 s in queue default" in f.evidence
    no_room = facts("tony.worker.instances=1", events=waited, tasks=[task("worker:0", start=T0 + 110)],
                    queues=(("urgent", 100),))
    assert only(report.advise(no_room), "waiting") == []  # no suggestion, no finding
    quick = events(("SUBMITTED", 0, None), ("AM_STARTED", 5, None), ("REQUESTED", 6, None), ("ALLOCATED", 7, "worker:0"))
    assert only(report.advise(facts("tony.worker.instances=1", events=quick, tasks=[task("worker:0")],
                                    queues=(("urgent", 20_000),))), "waiting") == []


def test_a_long_wait_for_containers_under_a_placement_constraint_drops_it():
    held = events(("SUBMITTED", 0, None), ("AM_STARTED", 2, None), ("REQUESTED", 3, None),
                  ("ALLOCATED", 90, "worker:0"), ("ALLOCATED", 95, "worker:1"), ("SPEC_SERVED", 100, "worker:0"))
    job = facts("tony.worker.instances=2", "tony.worker.placement-spec=notin,node,worker", events=held,
                tasks=[task("worker:0", start=T0 + 100), task("worker:1", start=T0 + 100)])
    [f] = only(report.advise(job), "waiting")
    assert (f.suggestion.key, f.suggestion.value) == ("tony.worker.placement-spec", "")
    assert "92 s for its containers" in f.evidence
    free = facts("tony.worker.instances=2", events=held,
                 tasks=[task("worker:0", start=T0 + 100), task("worker:1", start=T0 + 100)])
    assert only(report.advise(free), "waiting") == []  # no constraint to drop, no queue with room: silent


def test_a_slow_container_start_says_what_to_ship():
    slow = events(("SUBMITTED", 0, None), ("LAUNCHED", 5, "worker:0"), ("REGISTERED", 45, "worker:0"),
                  ("LAUNCHED", 5, "worker:1"), ("REGISTERED", 8, "worker:1"))
    job = facts("tony.worker.instances=2", events=slow, tasks=[task("worker:0", ran=40), task("worker:1", ran=40)])
    [f] = only(report.advise(job), "startup")
    assert f.suggestion.kind == "code" and "worker:0's container took 40 s" in f.evidence
    fast = events(("SUBMITTED", 0, None), ("LAUNCHED", 5, "worker:0"), ("REGISTERED", 8, "worker:0"))
    assert only(report.advise(facts("tony.worker.instances=1", events=fast, tasks=[task("worker:0")])), "startup") == []


def test_a_worker_that_outlived_the_chief_gets_the_after_chief_timeout_one_bound_by_its_vcores_more():
    job = facts("tony.worker.instances=3", tasks=[task("worker:0", ran=15), task("worker:1", ran=16),
                                                 task("worker:2", ran=60)])
    [f] = only(report.advise(job), "stragglers")
    assert (f.suggestion.key, f.suggestion.value) == ("tony.application.after-chief-timeout-ms", "40000")
    assert "worker:2 took 60 s, the other worker tasks 16 s" in f.evidence
    bound = facts("tony.worker.instances=2", "tony.worker.vcores=2",
                  tasks=[task("worker:0", ran=15), task("worker:1", ran=60, AVG_CPU_UTILIZATION=195.0)])
    assert only(report.advise(bound), "stragglers")[0].suggestion.value == "3"  # tony.worker.vcores
    even = facts("tony.worker.instances=2", tasks=[task("worker:0", ran=50), task("worker:1", ran=60)])
    assert only(report.advise(even), "stragglers") == []
    # the timeout stops every tracked type: an evaluator that needed 50 s after the chief keeps them
    with_eval = facts("tony.worker.instances=3", "tony.evaluator.instances=1",
                      tasks=[task("worker:0", ran=15), task("worker:1", ran=16), task("worker:2", ran=200),
                             task("evaluator:0", ran=65)])
    assert only(report.advise(with_eval), "stragglers")[0].suggestion.value == "80000"
    # one key, one value: a CPU-bound straggler's vcores win over the type's (the more pressing)
    both = facts("tony.worker.instances=2", "tony.worker.vcores=10",
                 tasks=[task("worker:0", ran=100, MAX_CPU_UTILIZATION=905.0, AVG_CPU_UTILIZATION=905.0),
                        task("worker:1", ran=200, MAX_CPU_UTILIZATION=905.0, AVG_CPU_UTILIZATION=905.0)])
    keyed = [(f.heuristic, f.suggestion.value) for f in report.advise(both) if f.suggestion.key == "tony.worker.vcores"]
    assert keyed == [("stragglers", "11")]


def test_parameter_servers_at_their_limit_while_workers_idle_get_one_more():
    job = facts("tony.worker.instances=2", "tony.ps.instances=1",
                tasks=[task("ps:0", state="STOPPED", AVG_CPU_UTILIZATION=99.0),
                       task("worker:0", AVG_CPU_UTILIZATION=20.0), task("worker:1", AVG_CPU_UTILIZATION=25.0)])
    [f] = only(report.advise(job), "stragglers")
    assert (f.suggestion.key, f.suggestion.value) == ("tony.ps.instances", "2")


# ---- failures ---------------------------------------------------------------------------------------------
def test_a_node_with_two_failures_the_retries_the_preemption_and_the_timeout():
    on_n2 = [{"task": "worker:0", "kind": "signal", "host": "n2"}, {"task": "worker:0", "kind": "lost", "host": "n2"}]
    findings = report.advise(facts("tony.worker.instances=1", "tony.am.retry-count=2", tasks=[task("worker:0")],
                                   failures=on_n2, restarts_used=2))
    [node] = only(findings, "failures")
    assert node.suggestion.key == "tony.task.max-failures-per-node" and "2 of the job's failures were on n2" in node.evidence
    limited = facts("tony.worker.instances=1", "tony.am.retry-count=2", "tony.task.max-failures-per-node=2",
                    tasks=[task("worker:0")], failures=on_n2, restarts_used=2)
    assert only(report.advise(limited), "failures") == []  # the limit already took the node out
    spent = facts("tony.worker.instances=1", "tony.am.retry-count=1", status="FAILED", restarts_used=1,
                  tasks=[task("worker:0", state="FAILED")], failures=[{"task": "worker:0", "kind": "signal", "host": "n1"},
                                                                      {"task": "worker:0", "kind": "lost", "host": "n3"}])
    assert [(f.suggestion.key, f.suggestion.value) for f in only(report.advise(spent), "failures")] == \
        [("tony.am.retry-count", "3")]
    own = facts("tony.worker.instances=1", "tony.am.retry-count=1", status="FAILED", restarts_used=1,
                tasks=[task("worker:0", state="FAILED")], failures=[{"task": "worker:0", "kind": "exit_code", "host": "n1"}])
    assert only(report.advise(own), "failures") == []  # the user's own exit code: more retries would not help
    preempted = facts("tony.worker.instances=1", tasks=[task("worker:0")], events=events(("PREEMPTION", 30, "worker:0")),
                      failures=[{"task": "worker:0", "kind": "preempted", "exit_code": -102, "host": "n1"}])
    [f] = only(report.advise(preempted), "failures")
    assert f.suggestion.kind == "code" and "TONY_PREEMPTION_DEADLINE_FILE" in f.suggestion.value
    slack = facts("tony.worker.instances=1", "tony.application.timeout=3600000", tasks=[task("worker:0", ran=20)])
    assert [(f.suggestion.key, f.suggestion.value) for f in only(report.advise(slack), "failures")] == \
        [("tony.application.timeout", "120000")]  # 3 x the job's 30 s, in whole minutes


# ---- the report ---------------------------------------------------------------------------------------------
def test_findings_rank_by_severity_then_waste_and_apply_to_the_jobs_own_config():
    job = facts("tony.worker.instances=2", "tony.worker.memory=8g", "tony.worker.vcores=2",
                tasks=[task(f"worker:{i}", MAX_MEMORY_BYTES=200 * MB, MAX_CPU_UTILIZATION=100.0) for i in range(2)])
    findings = report.advise(job)
    assert [f.heuristic for f in findings] == ["memory", "vcores"]
    assert report.top_line(findings).startswith("advice: worker asked for 8192 MB") and "--conf tony.worker.memory=" \
        in report.top_line(findings)
    own = props("tony.worker.instances=2", "tony.worker.memory=8g", "tony.worker.vcores=2")
    written = report.applied({**own, "tony.application.id": "application_1_0001"}, props(), findings)
    assert written["tony.worker.memory"] == findings[0].suggestion.value and written["tony.worker.vcores"] == "1"
    assert written["tony.worker.instances"] == "2" and "tony.application.id" not in written
    assert "tony.am.memory" not in written  # a default the job did not set
    as_json = report.to_json("application_1_0001", findings)
    assert set(as_json["findings"][0]) == {"heuristic", "severity", "task_type", "evidence", "suggestion", "waste",
                                           "waste_unit"}
    assert set(as_json["waste"]) == {"GB-hours", "vcore-hours"}
    assert set(as_json["findings"][0]["suggestion"]) == {"key", "value", "kind"}
    assert Finding.from_dict(as_json["findings"][1]).to_dict() == findings[1].to_dict()
    assert report.text("x", []) == "x: nothing to advise; the job used about what it asked for"


def test_every_threshold_has_its_reason_and_the_docs_table_says_it():
    rows = thresholds.table()
    assert len(rows) > 15 and all(why for _, _, why in rows)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "advice.md").read_text()
    missing = [name for name, value, why in rows if f"| `{name}` | {value} | {why} |" not in docs]
    assert missing == [], f"docs/advice.md's table is not thresholds.table() for {missing}"


def test_history_facts_take_failures_from_the_events_with_their_hosts(tmp_path):
    evs = [{"kind": "ALLOCATED", "ts": 1, "task": "worker:0", "host": "h1"},
           {"kind": "TASK_FINISHED", "ts": 5, "task": "worker:0", "failure_kind": "signal", "signal": "SIGKILL",
            "message": "killed by SIGKILL"},
           {"kind": "ALLOCATED", "ts": 6, "task": "worker:0", "host": "h2"},
           {"kind": "TASK_FINISHED", "ts": 9, "task": "worker:0", "exit_code": 0}]
    assert [(f["host"], f["kind"]) for f in failures_from_events(evs, None)] == [("h1", "signal")]
    summary = {"app_id": "application_1_0002", "final_status": "SUCCEEDED", "submitted_at": 0, "finished_at": 10,
               "tasks": [{"name": "worker:0", "state": "SUCCEEDED", "started_at": 6, "finished_at": 9, "metrics": {}}]}
    job = from_history(summary, evs, props("tony.worker.instances=1"), 128)
    assert job.spec.type("worker").instances == 1 and job.tasks[0].type == "worker" and job.failures[0]["host"] == "h1"
    (tmp_path / "yarn-site.xml").write_text("<configuration><property><name>yarn.scheduler.minimum-allocation-mb</name>"
                                            "<value>256</value></property></configuration>")
    assert allocation_limits(str(tmp_path))[0] == 256 and allocation_limits(str(tmp_path / "none")) == (1024, None)
    with pytest.raises(Exception, match="no configuration"):
        from_history(summary, evs, {}, 128)
