"""Unit tests of the observability logic: metrics sampling, the live view's summary and table,
history layout, event formats (JSON Lines, Parquet), summaries, TonY .jhist import, and the
AM's history writer against a file system double (the real one is tested in integration)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import time

import pytest
from rich.console import Console

from tony_py.am.core import events as ev
from tony_py.am.history import HistoryWriter
from tony_py.client import monitor
from tony_py.errors import UsageError
from tony_py.executor.metrics import MAX_GPU_ERRORS, MetricsSampler, query_gpus
from tony_py.history import jhist, layout, store, summary

from harness import Harness

pytestmark = pytest.mark.unit


def _fake_nvidia_smi(tmp_path, body: str) -> str:
    script = tmp_path / "nvidia-smi"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return str(script)


GPU_CSV = "0, GPU-aaa, 80, 1024, 4096\\n1, GPU-bbb, 20, 3072, 4096"


# ---- metrics ---------------------------------------------------------------------------------------
def test_query_gpus_parses_csv(tmp_path):
    smi = _fake_nvidia_smi(tmp_path, f'printf "{GPU_CSV}\\n"')
    assert query_gpus(smi) == [
        {"index": "0", "uuid": "GPU-aaa", "utilization": 80.0, "memory_used_mib": 1024.0, "memory_total_mib": 4096.0},
        {"index": "1", "uuid": "GPU-bbb", "utilization": 20.0, "memory_used_mib": 3072.0, "memory_total_mib": 4096.0},
    ]


def test_sampler_keeps_only_the_tasks_gpus_and_tony_names(tmp_path):
    smi = _fake_nvidia_smi(tmp_path, f'printf "{GPU_CSV}\\n"')
    sampler = MetricsSampler(gpus_wanted=True, visible_devices="1", nvidia_smi=smi)
    first = sampler.sample(None)
    assert first["gpu_utilization"] == 20.0 and first["gpu_count"] == 1
    assert first["gpu_memory_used_bytes"] == 3072 * 2**20
    assert first["MAX_GPU_FB_MEMORY_USAGE"] == 75.0 and first["AVG_GPU_UTILIZATION"] == 20.0
    # by uuid too, and both GPUs averaged
    both = MetricsSampler(gpus_wanted=True, visible_devices="GPU-aaa,1", nvidia_smi=smi).sample(None)
    assert both["gpu_utilization"] == 50.0 and both["gpu_count"] == 2


def test_fields_a_real_gpu_does_not_report_are_skipped_not_errors(tmp_path):
    """What real nvidia-smi prints for a MIG slice or a virtual GPU: [N/A] and [Not Supported]
    where it has no reading. Those fields are left out; the others are still measured, sample
    after sample (before, each such answer was an error and ten of them ended GPU metrics)."""
    csv = "0, GPU-aaa, [N/A], 1024, 4096\\n1, GPU-bbb, [Not Supported], [N/A], [N/A]"
    smi = _fake_nvidia_smi(tmp_path, f'printf "{csv}\\n"')
    assert query_gpus(smi)[1] == {"index": "1", "uuid": "GPU-bbb", "utilization": None, "memory_used_mib": None,
                                  "memory_total_mib": None}
    sampler = MetricsSampler(gpus_wanted=True, visible_devices="0,1", nvidia_smi=smi)
    for _ in range(MAX_GPU_ERRORS + 2):
        out = sampler.sample(None)
    assert sampler.gpu_errors == 0 and out["gpu_count"] == 2
    assert "gpu_utilization" not in out and "MAX_GPU_UTILIZATION" not in out
    assert out["gpu_memory_used_bytes"] == 1024 * 2**20 and out["MAX_GPU_FB_MEMORY_USAGE"] == 25.0


def test_an_answer_that_is_not_the_query_is_an_error(tmp_path):
    smi = _fake_nvidia_smi(tmp_path, 'echo "NVIDIA-SMI has failed because it could not communicate with the driver"')
    sampler = MetricsSampler(gpus_wanted=True, nvidia_smi=smi)
    assert "gpu_count" not in sampler.sample(None) and sampler.gpu_errors == 1


def test_sampler_without_nvidia_smi_has_no_gpu_metrics_and_no_error(tmp_path):
    sampler = MetricsSampler(gpus_wanted=True, nvidia_smi=str(tmp_path / "absent"))
    for _ in range(MAX_GPU_ERRORS + 2):
        out = sampler.sample(None)
    assert not any(k.startswith(("gpu_", "MAX_GPU", "AVG_GPU")) for k in out)
    assert sampler.gpu_errors == MAX_GPU_ERRORS  # given up: no more nvidia-smi runs
    assert "gpu_utilization" not in MetricsSampler(gpus_wanted=False).sample(None)


def test_sampler_measures_a_real_process_tree():
    import psutil

    child = subprocess.Popen([sys.executable, "-c",
                              "import subprocess,sys,time\n"
                              "b=bytearray(64*2**20)\n"
                              "p=subprocess.Popen([sys.executable,'-c','while True: pass'])\n"
                              "time.sleep(60)"])
    parent = psutil.Process(child.pid)

    def tree_cpu_s() -> float:
        return sum(t.user + t.system for t in (p.cpu_times() for p in [parent, *parent.children(recursive=True)]))

    try:
        # the tree is whole (the buffer allocated, the spinner started), however slowly it started
        deadline = time.monotonic() + 60
        while not (parent.children() and parent.memory_info().rss > 64 * 2**20):
            assert time.monotonic() < deadline, "the child never allocated its buffer and started the spinner"
            time.sleep(0.05)
        sampler = MetricsSampler(gpus_wanted=False)
        before, started = tree_cpu_s(), time.monotonic()
        sampler.sample(child.pid)
        time.sleep(1.0)
        out = sampler.sample(child.pid)
        truth = (tree_cpu_s() - before) / (time.monotonic() - started) * 100  # psutil's own view, same interval
    finally:
        for proc in parent.children(recursive=True):
            proc.kill()
        child.kill()
        child.wait()
    assert out["task_rss_bytes"] > 64 * 2**20  # the parent's buffer plus the grandchild
    # the parent only sleeps: what is measured is the grandchild's spinning, counted through the tree
    # (whatever share of a core a loaded machine gives it)
    assert truth > 5 and out["task_cpu_percent"] > 0.5 * truth, (out["task_cpu_percent"], truth)
    assert out["MAX_MEMORY_BYTES"] >= out["AVG_MEMORY_BYTES"] > 0


# ---- live view -------------------------------------------------------------------------------------
def _status(states, **extra):
    tasks = [{"name": f"worker:{i}", "type": "worker", "state": s, "attempt": 0} for i, s in enumerate(states)]
    return {"state": "RUNNING", "tasks": tasks, **extra}


def test_summary_line():
    line = monitor.summary({"state": "RUNNING"}, _status(["RUNNING"] * 3 + ["PENDING"], restarts_used=1,
                                                          restarts_allowed=3), 133)
    assert line == "3/4 running, 1 pending · restart 1 of 3 · 00:02:13"
    assert monitor.summary({"state": "ACCEPTED"}, None, 5) == "YARN ACCEPTED · 00:00:05"
    line = monitor.summary({"state": "RUNNING", "attempt": 2}, {**_status(["PENDING"]), "state": "ALLOCATING"}, 0)
    assert line.startswith("job ALLOCATING, 0/1 running") and "AM attempt 2" in line


def _render(table) -> str:
    buf = io.StringIO()
    Console(file=buf, width=160).print(table)
    return buf.getvalue()


def test_table_rows_then_collapse_per_type():
    status = _status(["RUNNING", "FAILED"])
    status["tasks"][0].update(host="node1", metrics={"task_rss_bytes": 3 * 2**30, "gpu_utilization": 87.0},
                              started_at=100.0)
    status["tasks"][1].update(exit_code=137, signal="SIGKILL", started_at=100.0, finished_at=110.0)
    text = _render(monitor.task_table(status, now=161.0))
    assert "node1" in text and "3.0 GB" in text and "87%" in text and "00:01:01" in text
    assert "SIGKILL" in text and "00:00:10" in text
    big = _status(["RUNNING"] * 150 + ["PENDING"] * 50)
    text = _render(monitor.task_table(big, now=0))
    assert "worker:1" not in text and "200" in text and "150" in text and "50" in text


# ---- events ----------------------------------------------------------------------------------------
def test_event_log_is_capped_but_listeners_see_everything():
    seen = []
    log = ev.EventLog(clock=lambda: 5.0, keep=10)
    log.listeners.append(seen.append)
    for i in range(25):
        log.record(ev.NOTE, f"n{i}", task="worker:0")
    assert len(log.recent) == 10 and len(seen) == 25 and log.count == 25
    assert log.lines(1)[0].endswith("worker:0: n24")


def test_coordinator_records_a_jobs_life(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    h.bring_up()
    h.result("worker:0")
    h.complete("worker:0")
    h.result("worker:1", code=3, stderr="boom")
    h.complete("worker:1", status=3)
    kinds = [e["kind"] for e in h.c.events.recent]
    for kind in (ev.ALLOCATED, ev.LAUNCHED, ev.REGISTERED, ev.SPEC_SERVED, ev.TASK_STARTED, ev.TASK_FINISHED,
                 ev.VERDICT):
        assert kind in kinds, kind
    failed = [e for e in h.c.events.recent if e["kind"] == ev.TASK_FINISHED and e["task"] == "worker:1"]
    assert failed and failed[0]["exit_code"] == 3
    assert [c["type"] for c in summary.conditions(list(h.c.events.recent))][:1] == ["ALLOCATING"]


# ---- history layout and formats ----------------------------------------------------------------------
def test_history_roots_follow_tonys_keys():
    conf = {}
    assert layout.roots(conf.get, "/user/ann") == ("/user/ann/.tony/history/intermediate",
                                                   "/user/ann/.tony/history/finished")
    conf = {"tony.history.location": layout.PLACEHOLDER}
    assert layout.roots(conf.get, "/user/ann")[0] == "/user/ann/.tony/history/intermediate"
    conf = {"tony.history.location": "hdfs:///h/", "tony.history.finished": "/done/"}
    assert layout.roots(conf.get, "/user/ann") == ("hdfs:///h/intermediate", "/done")
    day = layout.finished_dir("/f", "application_1_0001", 0)
    assert day == "/f/1970/01/01/application_1_0001"


def test_parse_since():
    before = time.time()
    since = store.parse_since("2h")
    assert before - 7200 <= since <= time.time() - 7200
    for bad in ("", "7", "d", "7w", "-1d"):
        with pytest.raises(ValueError):
            store.parse_since(bad)


def test_jsonl_survives_a_cut_off_line(tmp_path):
    path = tmp_path / "events.jsonl.inprogress"
    path.write_text('{"ts": 1, "kind": "SUBMITTED"}\n{"ts": 2, "kind": "AM_STA')
    assert store.read_jsonl(path) == [{"ts": 1, "kind": "SUBMITTED"}]
    assert store.read_jsonl(None) == []


def test_parquet_round_trip_keeps_every_field(tmp_path):
    events = [
        {"ts": 1700000000.5, "kind": "SUBMITTED", "task": None, "message": "submitted"},
        {"ts": 1700000001.25, "kind": "TASK_FINISHED", "task": "worker:0", "attempt": 1, "exit_code": 137,
         "signal": "SIGKILL", "failure_kind": "exit_code", "message": "killed",
         "metrics": {"MAX_MEMORY_BYTES": 2e9, "AVG_GPU_UTILIZATION": 55.5, "note": "not a number"},
         "stderr_tail": "Traceback\n  boom"},
    ]
    target = tmp_path / "events.parquet"
    store.write_parquet(events, "application_1_0001", target)
    back = store.read_parquet(target)
    assert back[0] == {"ts": 1700000000.5, "kind": "SUBMITTED", "message": "submitted"}
    assert back[1]["metrics"] == {"MAX_MEMORY_BYTES": 2e9, "AVG_GPU_UTILIZATION": 55.5}
    assert back[1]["stderr_tail"] == "Traceback\n  boom" and back[1]["exit_code"] == 137
    assert back[1]["ts"] == 1700000001.25
    import pyarrow.parquet as pq  # readable by anyone's pandas/Spark: plain columns, app_id included
    table = pq.read_table(target)
    assert table.column("app_id").to_pylist() == ["application_1_0001"] * 2


def test_summary_from_events_of_a_crashed_am():
    events = [
        {"ts": 10, "kind": "SUBMITTED"},
        {"ts": 11, "kind": "STATE", "state": "ALLOCATING", "message": "asking"},
        {"ts": 12, "kind": "TASK_STARTED", "task": "worker:0", "host": "n1", "container_id": "c1"},
        {"ts": 13, "kind": "TASK_STARTED", "task": "ps:0", "host": "n2"},
        {"ts": 14, "kind": "TASK_FINISHED", "task": "worker:0", "exit_code": 0, "metrics": {"MAX_MEMORY_BYTES": 5}},
        {"ts": 15, "kind": "RESTART_DECIDED"},
    ]
    s = store.summary_from_events("application_1_0002", events,
                                  {"final_status": "UNDEFINED", "user": "ann", "finish_time": 20000})
    assert s["final_status"] == "FAILED" and s["finished_at"] == 20 and s["submitted_at"] == 10
    assert s["restarts_used"] == 1 and s["finalized_by_reader"]
    assert [t["name"] for t in s["tasks"]] == ["ps:0", "worker:0"]
    assert s["tasks"][1]["state"] == "SUCCEEDED" and s["tasks"][1]["metrics"] == {"MAX_MEMORY_BYTES": 5}
    assert s["tasks"][0]["state"] == "RUNNING" and s["conditions"][0]["type"] == "ALLOCATING"


# ---- TonY .jhist import ---------------------------------------------------------------------------------
def _metric():
    return {"type": "record", "name": "Metric", "fields": [{"name": "name", "type": "string"},
                                                          {"name": "value", "type": "double"}]}


# The shape of tony-core/src/main/avro/*.avsc: an Event with a type enum, a union of bodies, a timestamp.
TONY_EVENT_SCHEMA = {
    "type": "record", "name": "Event", "namespace": "com.linkedin.tony.events", "fields": [
        {"name": "type", "type": {"type": "enum", "name": "EventType", "symbols": [
            "APPLICATION_INITED", "APPLICATION_FINISHED", "TASK_STARTED", "TASK_FINISHED"]}},
        {"name": "event", "type": [
            {"type": "record", "name": "ApplicationInited", "fields": [
                {"name": "applicationId", "type": "string"}, {"name": "numTasks", "type": "int"},
                {"name": "host", "type": "string"}]},
            {"type": "record", "name": "ApplicationFinished", "fields": [
                {"name": "applicationId", "type": "string"}, {"name": "failedTasks", "type": "int"},
                {"name": "finishedTasks", "type": "int"}, {"name": "metrics", "type": {"type": "array",
                                                                                    "items": _metric()}}]},
            {"type": "record", "name": "TaskStarted", "fields": [
                {"name": "taskType", "type": "string"}, {"name": "taskIndex", "type": "int"},
                {"name": "host", "type": "string"}, {"name": "containerID", "type": "string"}]},
            {"type": "record", "name": "TaskFinished", "fields": [
                {"name": "taskType", "type": "string"}, {"name": "taskIndex", "type": "int"},
                {"name": "status", "type": "string"},
                {"name": "metrics", "type": {"type": "array", "items": "Metric"}},
                {"name": "containerDiagnostic", "type": ["null", "string"], "default": None}]},
        ]},
        {"name": "timestamp", "type": "long"}]}


def write_tony_jhist(path, *, failed: bool):
    import fastavro
    records = [
        {"type": "APPLICATION_INITED", "event": ("com.linkedin.tony.events.ApplicationInited", {
            "applicationId": "application_1600000000000_0007", "numTasks": 2, "host": "am-host"}),
         "timestamp": 1600000000000},
        {"type": "TASK_STARTED", "event": ("com.linkedin.tony.events.TaskStarted", {
            "taskType": "worker", "taskIndex": 0, "host": "n1", "containerID": "container_7_01"}),
         "timestamp": 1600000001000},
        {"type": "TASK_FINISHED", "event": ("com.linkedin.tony.events.TaskFinished", {
            "taskType": "worker", "taskIndex": 0, "status": "FAILED" if failed else "SUCCEEDED",
            "metrics": [{"name": "MAX_MEMORY_BYTES", "value": 1.5e9}], "containerDiagnostic": "exit 1"}),
         "timestamp": 1600000060000},
        {"type": "APPLICATION_FINISHED", "event": ("com.linkedin.tony.events.ApplicationFinished", {
            "applicationId": "application_1600000000000_0007", "failedTasks": int(failed),
            "finishedTasks": 1, "metrics": []}),
         "timestamp": 1600000061000},
    ]
    with open(path, "wb") as f:
        fastavro.writer(f, fastavro.parse_schema(TONY_EVENT_SCHEMA), records)


def test_read_tony_jhist(tmp_path):
    path = tmp_path / "application_1600000000000_0007-1600000000000-1600000061000-ann-FAILED.jhist"
    write_tony_jhist(path, failed=True)
    info, events = jhist.read_jhist(path)
    assert info == {"app_id": "application_1600000000000_0007", "started_at": 1600000000.0,
                    "finished_at": 1600000061.0, "user": "ann", "final_status": "FAILED"}
    assert [e["kind"] for e in events] == ["AM_STARTED", "TASK_STARTED", "TASK_FINISHED", "APP_FINISHED"]
    finished = events[2]
    assert finished["task"] == "worker:0" and finished["failure_kind"] == "exit_code"
    assert finished["metrics"] == {"MAX_MEMORY_BYTES": 1.5e9}
    s = store.summary_from_events(info["app_id"], events, {"final_status": "FAILED", "user": "ann"})
    assert s["tasks"][0]["state"] == "FAILED"


def test_jhist_refuses_what_is_not_tonys(tmp_path):
    with pytest.raises(UsageError, match="not a TonY history file name"):
        jhist.read_jhist(tmp_path / "something.avro")
    bad = tmp_path / "application_1_0001-1-2-ann-FAILED.jhist"
    bad.write_bytes(b"not avro at all")
    with pytest.raises(UsageError, match="not a readable Avro file"):
        jhist.read_jhist(bad)


# ---- the AM's history writer ------------------------------------------------------------------------------
class FsDouble:
    """The calls HistoryWriter makes of the JVM's FsBridge, on a local directory."""

    def __init__(self, root):
        self.root = root

    def _p(self, path):
        return self.root / path.lstrip("/")

    def openAppendLog(self, path):  # noqa: N802 - the Java name
        target = self._p(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        f = open(target, "a")

        class Log:
            def write(self, text):
                f.write(text)
                f.flush()

            def close(self):
                f.close()
        return Log()

    def writeText(self, path, text, mode):  # noqa: N802
        self._p(path).parent.mkdir(parents=True, exist_ok=True)
        self._p(path).write_text(text)
        os.chmod(self._p(path), mode)

    def rename(self, src, dst):
        self._p(dst).parent.mkdir(parents=True, exist_ok=True)
        os.rename(self._p(src), self._p(dst))
        return True


def test_history_writer_streams_then_moves_to_finished(tmp_path):
    fs = FsDouble(tmp_path)
    w = HistoryWriter(fs, "/h/intermediate", "/h/finished", "application_1_0003", am_attempt=1)
    w({"ts": 1.0, "kind": "SUBMITTED", "task": None, "message": ""})  # before the files are open: queued
    w.start("<configuration/>")
    w({"ts": 2.0, "kind": "STATE", "state": "RUNNING", "task": None, "message": ""})
    assert w.opened.wait(30)
    w.flush()
    inprogress = tmp_path / "h/intermediate/application_1_0003/events.jsonl.inprogress"
    assert [json.loads(x)["kind"] for x in inprogress.read_text().splitlines()] == ["SUBMITTED", "STATE"]
    assert len(w.states) == 1
    target = w.finish({"app_id": "application_1_0003", "finished_at": 86400.0})
    assert target == "/h/finished/1970/01/02/application_1_0003"
    done = tmp_path / target.lstrip("/")
    assert sorted(p.name for p in done.iterdir()) == ["events.jsonl", "job.json", "tony-final.xml"]
    assert stat.S_IMODE((done / "job.json").stat().st_mode) == 0o600


def test_history_writer_never_stops_a_job(tmp_path):
    class Broken:
        def openAppendLog(self, path):  # noqa: N802
            raise OSError("permission denied")

    w = HistoryWriter(Broken(), "/i", "/f", "application_1_0004", am_attempt=2)
    assert w.path.endswith("events-attempt2.jsonl.inprogress")
    w.start("<configuration/>")
    w({"ts": 1.0, "kind": "NOTE", "task": None, "message": ""})
    assert w.opened.wait(30)
    w.flush()
    assert w.failed and w.finish({}) is None


def test_history_writer_rides_out_a_file_system_that_stops_taking_writes(tmp_path):
    """The DataNode cut off for a while: the write fails, the events wait, and once writes work
    again they land in a new part file; the job's history loses nothing."""
    fs = FsDouble(tmp_path)
    down = {"now": False}
    real_open = fs.openAppendLog

    def open_log(path):
        if down["now"]:
            raise OSError("no DataNode")
        inner = real_open(path)

        class Log:
            def write(self, text):
                if down["now"]:
                    raise OSError("pipeline broken")
                inner.write(text)

            def close(self):
                inner.close()
        return Log()

    fs.openAppendLog = open_log
    w = HistoryWriter(fs, "/h/intermediate", "/h/finished", "application_1_0006", am_attempt=1)
    w._stop.set()  # no flushes from the writer's thread: this test flushes
    w.start("<configuration/>")
    assert w.opened.wait(30)
    w({"ts": 1.0, "kind": "STATE", "task": None, "message": "a"})
    w.flush()
    down["now"] = True
    w({"ts": 2.0, "kind": "NOTE", "task": None, "message": "b"})
    w.flush()  # fails: kept
    w({"ts": 3.0, "kind": "NOTE", "task": None, "message": "c"})
    w.flush()  # still down: no file to write to
    assert not w.failed and len(w._pending) == 2
    down["now"] = False
    w.flush()
    target = w.finish({"app_id": "application_1_0006", "finished_at": 86400.0})
    done = tmp_path / target.lstrip("/")
    assert sorted(p.name for p in done.iterdir()) == ["events-part1.jsonl", "events.jsonl", "job.json",
                                                      "tony-final.xml"]
    lines = [json.loads(x)["message"] for p in sorted(done.glob("events*.jsonl")) for x in p.read_text().splitlines()]
    assert sorted(lines) == ["a", "b", "c"]


def test_history_writer_does_not_wait_for_a_stuck_write_at_the_end(tmp_path, monkeypatch):
    """After a DataNode came back, HDFS may hold a broken pipeline for a minute before a write
    fails. The job's end writes the events again to a new part file instead of waiting (the
    verdict and the end of the job must not be lost), and readers see each event once even when
    the stuck write lands after all."""
    import threading
    from tony_py.am import history as am_history

    monkeypatch.setattr(am_history, "FINISH_WAIT_S", 0.2)
    fs = FsDouble(tmp_path)
    stuck, release, landed = threading.Event(), threading.Event(), threading.Event()
    real_open = fs.openAppendLog
    opened = []

    def open_log(path):
        inner = real_open(path)
        opened.append(path)

        class Log:
            def write(self, text):
                hangs = len(opened) == 1 and "b" in text  # the first file's second write hangs
                if hangs:
                    stuck.set()
                    release.wait(60)
                inner.write(text)
                if hangs:
                    landed.set()

            def close(self):
                inner.close()
        return Log()

    fs.openAppendLog = open_log
    w = HistoryWriter(fs, "/h/intermediate", "/h/finished", "application_1_0007", am_attempt=1)
    w({"ts": 1.0, "kind": "STATE", "task": None, "message": "a"})
    w.start("<configuration/>")
    assert w.opened.wait(30)
    deadline = time.time() + 30
    while w._pending:  # the writer's thread writes "a" first
        assert time.time() < deadline, "the writer's thread never wrote the first event"
        time.sleep(0.05)
    w({"ts": 2.0, "kind": "NOTE", "task": None, "message": "b"})
    assert stuck.wait(30)  # the writer's thread is now in a write that does not return
    w({"ts": 3.0, "kind": "VERDICT", "task": None, "message": "c"})
    target = w.finish({"app_id": "application_1_0007", "finished_at": 86400.0})
    assert target is not None and len(opened) == 2  # a new part file took the events
    release.set()  # the stuck write lands after all: "b" is now in two files
    assert landed.wait(30)

    class Gw:
        def call(self, what, fn, *args):
            return fn(*args)

    class Listing:
        def listFiles(self, directory):  # noqa: N802
            return [f"{directory}/{p.name}" for p in sorted((tmp_path / directory.lstrip("/")).iterdir())]

    reader = store.HistoryStore.__new__(store.HistoryStore)
    reader.gw, reader.fs = Gw(), Listing()
    reader._local = lambda remote: local if (local := tmp_path / remote.lstrip("/")).exists() else None
    assert [e["message"] for e in reader.events({"_dir": target})] == ["a", "b", "c"]


def test_purge_takes_whole_days_past_the_retention_and_reads_no_job():
    tree = {
        "/f": ["/f/2017", "/f/2026", "/f/notes"],
        "/f/2017": ["/f/2017/07"], "/f/2017/07": ["/f/2017/07/14"], "/f/2017/07/14": ["/f/2017/07/14/app_old"],
        "/f/2026": ["/f/2026/11", "/f/2026/13"],
        "/f/2026/11": ["/f/2026/11/20", "/f/2026/11/21"],
        "/f/2026/11/20": ["/f/2026/11/20/app_a", "/f/2026/11/20/app_b"], "/f/2026/11/21": ["/f/2026/11/21/app_c"],
        "/f/2026/13": ["/f/2026/13/01"], "/f/2026/13/01": ["/f/2026/13/01/app_odd"],
    }
    deleted = []
    cutoff = layout.calendar.timegm((2026, 11, 21, 12, 0, 0))  # mid-day: the 21st is kept whole
    removed = layout.purge_expired("/f", lambda d: tree.get(d, []), lambda d: deleted.append(d) or True, cutoff)
    assert sorted(removed) == ["app_a", "app_b", "app_old"]
    assert deleted == ["/f/2017/07/14", "/f/2026/11/20"]  # never a month that is not one, nor "notes"


def test_history_writer_purges_after_moving(tmp_path):
    fs = FsDouble(tmp_path)
    old = tmp_path / "h/finished/2001/01/01/application_0_0001"
    old.mkdir(parents=True)
    fs.listDirs = lambda d: [str(p.relative_to(tmp_path)).join(["/", ""]) for p in fs._p(d).iterdir() if p.is_dir()] \
        if fs._p(d).is_dir() else []
    fs.delete = lambda d, recursive: __import__("shutil").rmtree(fs._p(d)) or True
    w = HistoryWriter(fs, "/h/intermediate", "/h/finished", "application_1_0005", am_attempt=1, retention_s=86400)
    w.start("<configuration/>")
    assert w.finish({"app_id": "application_1_0005", "finished_at": time.time()})
    assert not old.exists()
    assert list((tmp_path / "h/finished").rglob("application_1_0005"))


def test_the_event_log_keeps_each_milestones_first_however_long_the_job():
    """The advice needs when the job was submitted and its containers started, long after the
    last MAX_KEPT events have moved on."""
    from tony_py.am.core import events as ev

    log = ev.EventLog(clock=iter(range(10_000)).__next__, keep=5)
    log.record(ev.SUBMITTED)
    log.record(ev.LAUNCHED, task="worker:0")
    log.record(ev.LAUNCHED, task="worker:0")  # (a restart in place: the first one stays)
    for _ in range(20):
        log.record(ev.NOTE, "busy")
    kept = log.milestones()
    assert [(e["kind"], e["ts"]) for e in kept[:2]] == [(ev.SUBMITTED, 0), (ev.LAUNCHED, 1)]
    assert len(kept) == 7 and [e["kind"] for e in kept[2:]] == [ev.NOTE] * 5  # and the recent ones, once each
