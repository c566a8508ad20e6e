"""`tony advise` on real jobs (tony_py/advice): jobs mis-sized on purpose get each finding with
its suggested value, the rerun with `--write`'s tony.xml succeeds on the smaller request and
gets none of them; each other heuristic triggered once by a job that earns it. The heuristics'
logic, thresholds and the cases beside them: tests/unit/test_advice_logic.py."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
import threading

from tony_py.config.values import parse_memory_mb

from support import JOBS, PYTHON, ROOT, Background, history_of, tasks_running, wait_for

METRICS = "tony.task.metrics-interval-ms=1000"


def advise(cluster, *args: str, rc: int = 0) -> dict | str:
    proc = subprocess.run([PYTHON, "-m", "tony_py.cli", "advise", *args], cwd=ROOT, env=cluster.env(),
                          capture_output=True, text=True, timeout=180)
    assert proc.returncode == rc, (args, proc.returncode, proc.stderr[-3000:])
    return json.loads(proc.stdout) if "--json" in args else proc.stdout + proc.stderr


def findings(cluster, app_id: str, *args: str) -> dict[str, dict]:
    """{heuristic: finding} of a job (one finding per heuristic in these jobs)."""
    out = advise(cluster, app_id, "--json", *args)
    assert out["app_id"] == app_id
    return {f["heuristic"]: f for f in out["findings"]}


def running_finding(cluster, app_id: str, heuristic: str, task_type: str) -> dict | None:
    """A running job's finding from its AM, None while the AM has not worked it out yet."""
    proc = subprocess.run([PYTHON, "-m", "tony_py.cli", "advise", app_id, "--json"], cwd=ROOT, env=cluster.env(),
                          capture_output=True, text=True, timeout=60)
    found = json.loads(proc.stdout)["findings"] if proc.returncode == 0 else []
    return next((f for f in found if (f["heuristic"], f["task_type"]) == (heuristic, task_type)), None)


def probe(tmp_path, name: str, *conf: str, params: str, framework: str = "pytorch") -> list[str]:
    out = ["--src_dir", str(JOBS), "--executes", "probe.py", "--python_binary_path", PYTHON,
           "--task_params", f"--out {tmp_path / name} {params}", "--conf", f"tony.application.framework={framework}",
           "--conf", "tony.am.memory=512m", "--conf", METRICS]
    for c in conf:
        out += ["--conf", c]
    return out


def test_a_missized_job_gets_its_values_and_the_rerun_with_them_succeeds_with_none(tony, cluster, tmp_path):
    """8 GB and 2 vcores for a single-threaded task that holds about 100 MB, a worker that runs
    40 s past the chief, and an hour's timeout for a minute's job."""
    params = "--burn --sleep worker:0:12,worker:1:52"
    first = tony(*probe(tmp_path, "first", "tony.worker.instances=2", "tony.worker.memory=8g", "tony.worker.vcores=2",
                        "tony.application.timeout=3600000", params=params))
    assert first.rc == 0, first.output[-3000:]
    # the client's last line: the most pressing finding
    assert "advice: worker asked for 8192 MB per task" in first.stdout, first.stdout[-2000:]
    written = tmp_path / "next.xml"
    found = findings(cluster, first.app_id, "--write", str(written))
    assert set(found) == {"memory", "vcores", "stragglers", "failures"}, found
    memory = found["memory"]
    assert (memory["severity"], memory["task_type"], memory["suggestion"]["key"]) == ("critical", "worker",
                                                                                       "tony.worker.memory")
    suggested_mb = int(memory["suggestion"]["value"].rstrip("m"))
    # the peak x 1.25, in the cluster's 128 MB steps
    assert suggested_mb % 128 == 0 and 128 <= suggested_mb <= 512, memory
    assert (found["vcores"]["suggestion"]["key"], found["vcores"]["suggestion"]["value"]) == ("tony.worker.vcores", "1")
    assert found["stragglers"]["suggestion"] == {"key": "tony.application.after-chief-timeout-ms", "value": "30000",
                                                 "kind": "conf"}
    assert "worker:1 took" in found["stragglers"]["evidence"]
    assert found["failures"]["suggestion"]["key"] == "tony.application.timeout"
    # the history keeps what the AM found (the portal ranks jobs by it)
    shown = history_of(cluster, first.app_id)
    assert {f["heuristic"] for f in shown["advice"]} == set(found) and shown["waste"]["GB-hours"] > 0

    again = tony(*probe(tmp_path, "again", params=params), "--conf_file", str(written))
    assert again.rc == 0, again.output[-3000:]
    config = history_of(cluster, again.app_id, "--config")["config"]
    assert (config["tony.worker.memory"], config["tony.worker.vcores"]) == (memory["suggestion"]["value"], "1")
    assert findings(cluster, again.app_id) == {}, "the rerun with the suggested values still got findings"
    diagnostics = cluster.app(again.app_id)["diagnostics"]
    assert "stopped worker:1" in diagnostics and "after-chief-timeout-ms" in diagnostics  # not waited for


def test_a_task_yarn_killed_for_memory_is_given_more_and_the_same_load_fits_in_it(tony, cluster, tmp_path):
    """worker:0 holds 600 MB in a 512 MB container: the
    NodeManager's physical-memory check kills it (it would otherwise sleep 5 minutes). The rerun
    holds the same 600 MB in the request `--write` gives and succeeds."""
    first = tony(*probe(tmp_path, "killed", "tony.worker.instances=1", "tony.worker.memory=512m",
                        "tony.am.retry-count=0", params="--hold worker:0:600 --sleep worker:0:300"))
    assert first.rc == 1, first.output[-3000:]
    assert "worker:0" in first.output and "physical memory" in first.output, first.output[-3000:]
    written = tmp_path / "more.xml"
    memory = findings(cluster, first.app_id, "--write", str(written))["memory"]
    assert (memory["severity"], memory["task_type"], memory["suggestion"]["key"]) == ("critical", "worker",
                                                                                       "tony.worker.memory")
    assert "YARN killed worker:0 for exceeding its 512 MB" in memory["evidence"], memory
    raised_mb = parse_memory_mb(memory["suggestion"]["value"], "tony.worker.memory")
    assert raised_mb >= 768 and raised_mb % 128 == 0, memory  # 1.5x the request, in the cluster's 128 MB steps

    again = tony(*probe(tmp_path, "fits", params="--hold worker:0:600 --sleep worker:0:4"), "--conf_file", str(written))
    assert again.rc == 0, again.output[-3000:]
    assert "memory" not in findings(cluster, again.app_id)


def test_gpus_a_job_never_touched_get_zero_and_used_ones_nothing(cluster, tony, tmp_path):
    readings = cluster.workdir / "gpu" / "readings.csv"
    standin = any(nm.get("gpu_standin") for nm in cluster.nodemanagers)
    if standin:  # the stand-in reports busy devices; a real GPU the probe never touches reads 0 by itself
        readings.write_text("0, GPU-70a7e5a0-0000-4000-8000-000000000000, 0, 0, 16384\n"
                            "1, GPU-70a7e5a0-0000-4000-8000-000000000001, 0, 0, 16384\n")
    try:
        idle = tony(*probe(tmp_path, "idle", "tony.worker.instances=1", "tony.worker.gpus=1", "tony.worker.memory=512m",
                           params="--sleep worker:0:6"))
    finally:
        readings.unlink(missing_ok=True)
    assert idle.rc == 0, idle.output[-3000:]
    gpus = findings(cluster, idle.app_id)["gpus"]
    assert (gpus["severity"], gpus["suggestion"]["value"]) == ("severe", "0") and "never used them" in gpus["evidence"]
    if standin:  # the stand-in's own readings (37 %, 64 %): a GPU in use says nothing
        used = tony(*probe(tmp_path, "used", "tony.worker.instances=1", "tony.worker.gpus=1", "tony.worker.memory=512m",
                           params="--sleep worker:0:6"))
        assert used.rc == 0 and "gpus" not in findings(cluster, used.app_id), used.output[-3000:]


def test_a_job_that_waited_for_a_full_queue_is_pointed_at_one_with_room(cluster, probe_args, tmp_path):
    """A filler takes the whole cluster in queue `default`; the job waits behind it there, while
    `urgent` (the local cluster's other queue) has room once the filler is gone."""
    release = tmp_path / "release"
    # every MB of both 12 GB NodeManagers: the filler's AM and a ps of 512 MB beside its two workers
    filler = Background(cluster, probe_args("tony.application.framework=tensorflow", "tony.worker.instances=2",
                                            f"tony.worker.memory={12 * 1024 - 512}m", "tony.ps.instances=1",
                                            "tony.ps.memory=512m", "tony.application.name=filler", METRICS,
                                            params=f"--until-file {release}"))
    try:
        wait_for(lambda: tasks_running(cluster, filler), 120, "the filler to hold the cluster")
        job = Background(cluster, probe(tmp_path, "waits", "tony.worker.instances=1", "tony.worker.memory=512m",
                                        params="--sleep worker:0:2"))
        wait_for(lambda: job.app_id, 60, "the job's submit")
        timer = threading.Timer(70, release.touch)  # the job waits 70 s in the queue
        timer.start()
        # meanwhile the filler, running, is advised by its AM (its history does not exist yet)
        live = wait_for(lambda: running_finding(cluster, filler.app_id, "memory", "worker"), 60,
                        "the running filler's advice from its AM")
        assert live["severity"] == "critical" and live["suggestion"]["key"] == "tony.worker.memory", live
        run = job.wait(timeout=300)
    finally:
        release.touch()
        if "timer" in locals():
            timer.cancel()
    assert filler.wait(timeout=120).rc == 0
    assert run.rc == 0, run.output[-3000:]
    waiting = findings(cluster, run.app_id)["waiting"]
    assert waiting["suggestion"] == {"key": "tony.yarn.queue", "value": "urgent", "kind": "conf"}, waiting
    assert "in queue default before its AM started" in waiting["evidence"]


def test_containers_slow_to_start_their_executor_say_what_to_ship(tony, cluster, tmp_path):
    """An interpreter that takes 40 s before it starts the executor (as a large venv localizing
    would). The figure the advice gives is the AM's own measure (its NodeManager's report that the
    container started, to its executor's registration), and that measure holds the container's
    own clock readings of its slow start: a loaded machine may lengthen it, never fake it. The
    advice's threshold is 30 s: the 10 s between leave the AM room to hear of the start late
    (measured on the loaded 2-core machine: it heard 3.1 s and 0.1 s before the container's own
    first reading)."""
    slow, clock = tmp_path / "slow-python", tmp_path / "slow-start"
    slow.write_text(f"#!/bin/sh\ncase \"$*\" in *tony_py.executor*) date +%s.%N >> {clock}; sleep 40; "
                    f"date +%s.%N >> {clock} ;; esac\nexec {PYTHON} \"$@\"\n")
    slow.chmod(slow.stat().st_mode | stat.S_IXUSR)
    args = probe(tmp_path, "slow", "tony.worker.instances=1", "tony.worker.memory=512m", f"tony.am.python={PYTHON}",
                 params="--sleep worker:0:2")
    args[args.index("--python_binary_path") + 1] = str(slow)
    run = tony(*args)
    assert run.rc == 0, run.output[-3000:]
    events = history_of(cluster, run.app_id)["events"]
    launched, registered = (next(e["ts"] for e in events if (e["kind"], e.get("task")) == (kind, "worker:0"))
                            for kind in ("LAUNCHED", "REGISTERED"))
    began, ended = (float(line) for line in clock.read_text().split())
    measured = (f"the AM: started {launched:.2f}, registered {registered:.2f}; "
                f"the container: slow start {began:.2f} to {ended:.2f}")
    # the NodeManager said the container started before its 40 s were over, and its executor
    # registered only after them (one host, one clock)
    assert launched <= ended <= registered and ended - began >= 40, measured
    print(f"[startup] {measured}: the AM's start {began - launched:+.2f} s before the container's first reading")
    startup = findings(cluster, run.app_id).get("startup")
    assert startup is not None, f"no start-up finding for a {registered - launched:.1f} s start ({measured})"
    assert startup["suggestion"]["kind"] == "code" and "compileall" in startup["suggestion"]["value"]
    assert startup["evidence"].startswith(f"worker:0's container took {registered - launched:.0f} s from its start "
                                          "to its executor's registration"), (startup, measured)


def test_a_node_where_a_task_keeps_dying_is_named_and_text_output_pastes(tony, cluster, tmp_path):
    """worker:0 dies by SIGKILL in its first two gang attempts (restarted in place: the same
    node), then succeeds."""
    run = tony(*probe(tmp_path, "dies", "tony.worker.instances=1", "tony.worker.memory=512m", "tony.am.retry-count=2",
                      params="--fail worker:0:-9 --first-attempts 2"))
    assert run.rc == 0, run.output[-3000:]
    node = findings(cluster, run.app_id)["failures"]
    assert node["suggestion"] == {"key": "tony.task.max-failures-per-node", "value": "2", "kind": "conf"}
    assert "2 of the job's failures were on" in node["evidence"] and "2 signal" in node["evidence"]
    text = advise(cluster, run.app_id)
    assert "--conf tony.task.max-failures-per-node=2" in text and text.startswith(f"{run.app_id}: ")


def test_advise_refuses_what_it_cannot_read_and_reads_a_copied_history_dir(tony, cluster, tmp_path):
    assert "nor in the job history" in advise(cluster, "application_1_0042", rc=2)
    assert "give one job" in advise(cluster, rc=2)
    run = tony(*probe(tmp_path, "copy", "tony.worker.instances=1", "tony.worker.memory=4g",
                      params="--burn --sleep worker:0:6"))
    assert run.rc == 0, run.output[-3000:]
    assert advise(cluster, "--last", "--json")["app_id"] == run.app_id  # the last job submitted from here
    shown = history_of(cluster, run.app_id, "--events", "--config")
    copy = tmp_path / "history-copy"
    copy.mkdir()
    events, config = shown.pop("events"), shown.pop("config")
    (copy / "job.json").write_text(json.dumps(shown))
    (copy / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (copy / "tony-final.xml").write_text("<configuration>" + "".join(
        f"<property><name>{k}</name><value>{v}</value></property>" for k, v in config.items()) + "</configuration>")
    offline = subprocess.run([PYTHON, "-m", "tony_py.cli", "advise", str(copy), "--json"], cwd=ROOT,
                             env={k: v for k, v in cluster.env().items() if k != "HADOOP_CONF_DIR"},
                             capture_output=True, text=True, timeout=120)
    assert offline.returncode == 0, offline.stderr[-2000:]
    assert "memory" in {f["heuristic"] for f in json.loads(offline.stdout)["findings"]}
    shutil.rmtree(copy)
