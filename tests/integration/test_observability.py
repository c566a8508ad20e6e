"""Seeing a job, on the real cluster: the client's live view under a pseudo-terminal, the AM's
page in a real headless Chromium (directly and through YARN's proxy), TensorBoard and metrics
on it, history that outlives the application (Parquet, job.json, finalized after a crash,
purged after its retention, TonY's .jhist imported), `tony logs` and the portal."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import threading
import time

import requests

from support import (PYTHON, ROOT, USER, Background, Browser, am_processes, probe_records, screenshot, tasks_running,
                     wait_for)
from test_cluster import hadoop_java

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def tony_cli(cluster, *args, timeout=120, rc: int = 0) -> subprocess.CompletedProcess:
    """`tony ARGS`, which must end with exit code `rc` (its stderr in the failure otherwise)."""
    proc = subprocess.run([PYTHON, "-m", "tony_py.cli", *args], cwd=ROOT, env=cluster.env(), capture_output=True,
                          text=True, timeout=timeout)
    assert proc.returncode == rc, (args, proc.returncode, proc.stderr[-3000:])
    return proc


# ---- the live view -----------------------------------------------------------------------------
def test_the_live_table_changes_while_the_job_runs_in_a_terminal(cluster, probe_args, tmp_path):
    release = tmp_path / "release"
    leader, follower = pty.openpty()
    proc = subprocess.Popen([PYTHON, "-m", "tony_py.submit", *probe_args(
        "tony.worker.instances=2", "tony.worker.memory=512m", params=f"--until-file {release}")],
        cwd=ROOT, env=cluster.env(COLUMNS="160", LINES="50", TERM="xterm"), stdin=follower, stdout=follower,
        stderr=follower, start_new_session=True)
    os.close(follower)
    screen, before = "", None
    deadline = time.monotonic() + 180
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([leader], [], [], 0.5)
            if ready:
                try:
                    screen += os.read(leader, 65536).decode(errors="replace")
                except OSError:
                    break
            # what the terminal showed while both tasks ran: the summary and worker:1's row drawn
            # (an event, not a pause after the summary: a loaded machine draws when it can)
            if before is None and "2/2 running" in (plain := ANSI.sub("", screen)) \
                    and re.search(r"worker:1\s*│\s*RUNNING", plain):
                before = plain
                release.touch()  # only now let the tasks finish
            if proc.poll() is not None and not ready:
                break
    finally:
        release.touch()
        proc.wait(timeout=60)
        os.close(leader)
    text = ANSI.sub("", screen)
    assert proc.returncode == 0 and before, text[-3000:]
    # the table moved through the job's life while it ran, not only at the end
    assert re.search(r"worker:0\s*│\s*(PENDING|ALLOCATED|LAUNCHED|REGISTERED)", before) or "YARN ACCEPTED" in before, before[-3000:]
    assert re.search(r"worker:0\s*│\s*SUCCEEDED", text), text[-3000:]


# ---- the AM's page, TensorBoard, metrics ---------------------------------------------------------
# The page links only http(s) URLs: a URL in the status must not run script (safeHref).
LINK_CASES = {"javascript:alert(1)": None, " JaVaScRiPt:alert(1)": None, "data:text/html,<b>x</b>": None,
              "vbscript:x": None, "http://nm:8042/logs": "http://nm:8042/logs", "https://tb:6006/": "https://tb:6006/",
              "status.json": "status.json"}


def test_the_am_page_in_chromium_directly_and_through_the_proxy(cluster, probe_args, tmp_path):
    release = tmp_path / "release"
    job = Background(cluster, probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                                         "tony.task.metrics-interval-ms=500",
                                         params=f"--until-file {release} --serve-tb --burn"))
    try:
        wait_for(lambda: tasks_running(cluster, job), 120, "both tasks to run")
        status = wait_for(lambda: (s := cluster.am_status(job.app_id)) and s.get("tensorboard_url")
                          and all((t.get("metrics") or {}).get("task_cpu_percent") is not None for t in s["tasks"])
                          and s, 60, "TensorBoard and CPU metrics in the status")
        record = probe_records(tmp_path)["worker:0"]
        direct = f"http://{record['AM_HOST']}:{record['AM_PORT']}/"
        proxied = f"{cluster.rm_web}/proxy/{job.app_id}/"
        with Browser() as browser:
            for name, url in (("direct", direct), ("proxy", proxied)):
                page = browser.page()
                page.goto(url)
                page.wait_for_selector("tr[data-task='worker:1']", timeout=15000)
                rows = page.locator("tr[data-task]")
                assert rows.count() == 2, name
                assert page.locator("#tasks td.state.RUNNING").count() == 2
                tb = page.locator(f"a[href='{status['tensorboard_url']}']")
                tb.first.wait_for(timeout=15000)
                link = page.locator("tr[data-task='worker:0'] a", has_text="stdout").first.get_attribute("href")
                assert requests.get(link, timeout=10).status_code == 200, link
                page.wait_for_function("document.querySelector('#main p.muted').textContent.includes('Refreshed')")
                cpu = page.locator("tr[data-task='worker:0'] td").nth(6).inner_text()
                assert cpu.endswith("%"), cpu
                if name == "proxy":  # the page's own link guard, in the browser that runs it, behind the proxy
                    assert page.evaluate("cases => cases.map(safeHref)", list(LINK_CASES)) == list(LINK_CASES.values())
                # 512 MB asked, about 130 MB used: the AM's own advice, with the value to paste
                page.wait_for_selector("#advice li[data-heuristic='memory']", timeout=30000)
                assert "--conf tony.worker.memory=" in page.locator("#advice").inner_text()
                shot = screenshot(page, f"dashboard-{name}.png")
                assert shot.stat().st_size > 10_000
            assert browser.errors == [], browser.errors
    finally:
        release.touch()
    run = job.wait(timeout=120)
    assert run.rc == 0, run.output[-3000:]
    assert f"TensorBoard: {status['tensorboard_url']}" in run.stdout


# ---- history, logs, portal -----------------------------------------------------------------------------
def test_history_logs_and_portal_after_a_failed_job(tony, cluster, probe_args, tmp_path):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m", "tony.task.metrics-interval-ms=300",
                           params="--sleep worker:1:30,worker:0:6 --burn --fail worker:0:3"))
    assert run.rc == 1, run.output[-3000:]
    app_id = run.app_id
    listed = json.loads(tony_cli(cluster, "history", "--json", "--status", "FAILED").stdout)
    summary = next(j for j in listed if j["app_id"] == app_id)
    assert summary["root_cause"]["task"] == "worker:0" and summary["root_cause"]["exit_code"] == 3
    assert summary["counts"]["worker"] == {"FAILED": 1, "STOPPED": 1}  # the chief failed; worker:1 was stopped
    worker0 = next(t for t in summary["tasks"] if t["name"] == "worker:0")
    assert worker0["metrics"]["MAX_MEMORY_BYTES"] > 64 << 20  # the ballast, seen by the executor's sampler
    assert "AVG_CPU_UTILIZATION" in worker0["metrics"]
    shown = json.loads(tony_cli(cluster, "history", "show", app_id, "--events", "--config", "--json").stdout)
    kinds = [e["kind"] for e in shown["events"]]
    for kind in ("SUBMITTED", "AM_STARTED", "ALLOCATED", "REGISTERED", "SPEC_SERVED", "TASK_STARTED",
                 "TASK_FINISHED", "VERDICT", "APP_FINISHED"):
        assert kind in kinds, kind
    assert shown["config"]["tony.worker.instances"] == "2"
    # the events are Parquet, readable with pyarrow as they are
    directory = f"/user/{USER}/.tony/history/finished"
    listing = hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-ls", "-R", directory)
    assert listing.returncode == 0, listing.stderr[-2000:]
    listing = listing.stdout
    parquet = next(line.split()[-1] for line in listing.splitlines() if app_id in line and line.endswith("events.parquet"))
    assert hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-get", parquet, str(tmp_path / "e.parquet")).returncode == 0
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "e.parquet")
    assert "VERDICT" in table.column("kind").to_pylist() and table.num_rows == len(shown["events"])
    # logs without a browser, from YARN's aggregated logs now that the job is over
    stderr = tony_cli(cluster, "logs", app_id, "--file", "stderr")
    assert "probe worker:0 failing on purpose with exit code 3" in stderr.stdout, stderr.stderr
    assert "started pid" in tony_cli(cluster, "logs", app_id, "--task", "worker:1", "--file", "executor").stdout
    assert "python AM exited" in tony_cli(cluster, "logs", app_id, "--file", "am").stdout
    bad = tony_cli(cluster, "logs", app_id, "--task", "worker:7", rc=2)
    assert "no such task" in bad.stderr
    # the portal, in a real browser
    portal = subprocess.Popen([PYTHON, "-m", "tony_py.cli", "portal", "--port", "0"], cwd=ROOT, env=cluster.env(),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        url = re.search(r"http://\S+/", portal.stdout.readline()).group(0)
        with Browser() as browser:
            page = browser.page()
            page.goto(url + "?status=FAILED&sort=waste")
            assert "GB-hours" in page.locator(f"tr[data-app='{app_id}'] td.waste").inner_text()  # asked, not used
            page.locator(f"tr[data-app='{app_id}'] a").first.click()
            page.wait_for_selector("#root-cause")
            assert page.locator("tr[data-task]").count() == 2
            assert "--conf tony.worker.memory=" in page.locator("#advice li[data-heuristic='memory']").inner_text()
            assert page.locator("#events tbody tr").count() == len(shown["events"])
            screenshot(page, "portal-job.png")
            page.goto(url + f"jobs/{app_id}/config")
            assert "tony.worker.instances" in page.locator("#config").inner_text()
            assert browser.errors == []
    finally:
        portal.terminate()
        portal.wait(timeout=10)


def test_logs_follow_a_running_task(cluster, probe_args, tmp_path):
    release = tmp_path / "release"
    job = Background(cluster, probe_args("tony.worker.instances=1", "tony.worker.memory=512m",
                                         params=f"--until-file {release} --print-every 0.5"))
    try:
        wait_for(lambda: tasks_running(cluster, job), 120, "the task to run")
        follow = subprocess.Popen([PYTHON, "-m", "tony_py.cli", "logs", job.app_id, "-f"], cwd=ROOT,
                                  env=cluster.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        reader = threading.Thread(target=lambda: lines.extend(follow.stdout), daemon=True)
        reader.start()
        wait_for(lambda: any(line.startswith("line 8") for line in lines), 60, "followed lines to keep coming")
        release.touch()
        follow.wait(timeout=60)  # ends with the job
        numbers = [int(line.split()[1]) for line in lines if line.startswith("line ")]
        assert numbers == list(range(1, len(numbers) + 1))  # nothing lost, nothing twice
    finally:
        release.touch()
    assert job.wait(timeout=120).rc == 0


def test_a_crashed_ams_history_is_finalized_by_the_next_reader(cluster, probe_args, tmp_path):
    job = Background(cluster, probe_args("tony.worker.instances=1", "tony.worker.memory=512m", "tony.am.max-attempts=1",
                                         params="--forever worker:0"))
    wait_for(lambda: tasks_running(cluster, job), 120, "the task to run")
    # the AM's event log on HDFS already says the task started (it is flushed every second)
    wait_for(lambda: "TASK_STARTED" in cluster.hdfs_read_dir(f"/user/{USER}/.tony/history/intermediate/{job.app_id}"),
             60, "the task's start in the AM's event log on HDFS")
    am_processes(job.app_id)[0].kill()
    run = job.wait(timeout=120)
    assert run.rc == 1
    listed = json.loads(tony_cli(cluster, "history", "--json").stdout)
    summary = next(j for j in listed if j["app_id"] == run.app_id)
    assert summary["finalized_by_reader"] and summary["final_status"] == "FAILED"
    assert [t["name"] for t in summary["tasks"]] == ["worker:0"]


def test_retention_purges_and_tonys_jhist_imports(tony, cluster, probe_args, tmp_path):
    import fastavro

    schema = fastavro.parse_schema(JHIST_SCHEMA)
    jhist = tmp_path / "application_1500000000000_0042-1500000000000-1500000100000-alice-SUCCEEDED.jhist"
    with open(jhist, "wb") as f:
        fastavro.writer(f, schema, [
            {"type": "APPLICATION_INITED", "timestamp": 1500000000000,
             "event": {"applicationId": "application_1500000000000_0042", "numTasks": 1, "host": "h1", "containerID": None}},
            {"type": "TASK_STARTED", "timestamp": 1500000001000,
             "event": {"taskType": "worker", "taskIndex": 0, "host": "h1", "containerID": "container_e01_0042_01_000002"}},
            {"type": "TASK_FINISHED", "timestamp": 1500000090000,
             "event": {"taskType": "worker", "taskIndex": 0, "status": "SUCCEEDED",
                       "metrics": [{"name": "MAX_MEMORY_BYTES", "value": 2.0e9}], "containerDiagnostic": None}},
            {"type": "APPLICATION_FINISHED", "timestamp": 1500000100000,
             "event": {"applicationId": "application_1500000000000_0042", "finishedTasks": 1, "failedTasks": 0,
                       "metrics": []}}])
    tony_cli(cluster, "history", "import", str(jhist))
    shown = json.loads(tony_cli(cluster, "history", "show", "application_1500000000000_0042", "--json").stdout)
    assert shown["final_status"] == "SUCCEEDED" and shown["user"] == "alice"
    assert shown["tasks"][0]["metrics"]["MAX_MEMORY_BYTES"] == 2.0e9
    # 2017 is long past the default retention (30 days): the next job's AM purges it, and only it
    run = tony(*probe_args("tony.worker.instances=1", "tony.worker.memory=512m"))
    assert run.rc == 0, run.output[-3000:]
    remaining = [j["app_id"] for j in json.loads(tony_cli(cluster, "history", "--json").stdout)]
    assert "application_1500000000000_0042" not in remaining and run.app_id in remaining
    # and `tony history purge` does the same on demand
    tony_cli(cluster, "history", "import", str(jhist))
    purged = tony_cli(cluster, "history", "--conf", "tony.history.retention-sec=86400", "purge")
    assert "purged 1 job(s)" in purged.stdout, purged.stdout + purged.stderr
    remaining = [j["app_id"] for j in json.loads(tony_cli(cluster, "history", "list", "--json").stdout)]
    assert "application_1500000000000_0042" not in remaining and run.app_id in remaining


# TonY's tony-core/src/main/avro schemas, as one union (Event{type, event, timestamp})
JHIST_SCHEMA = {
    "type": "record", "name": "Event", "namespace": "com.linkedin.tony.events",
    "fields": [
        {"name": "type", "type": {"type": "enum", "name": "EventType",
                                  "symbols": ["APPLICATION_INITED", "APPLICATION_FINISHED", "TASK_STARTED",
                                              "TASK_FINISHED"]}},
        {"name": "event", "type": [
            {"type": "record", "name": "ApplicationInited", "fields": [
                {"name": "applicationId", "type": "string"}, {"name": "numTasks", "type": "int"},
                {"name": "host", "type": "string"}, {"name": "containerID", "type": ["null", "string"]}]},
            {"type": "record", "name": "ApplicationFinished", "fields": [
                {"name": "applicationId", "type": "string"}, {"name": "finishedTasks", "type": "int"},
                {"name": "failedTasks", "type": "int"},
                {"name": "metrics", "type": {"type": "array", "items": {
                    "type": "record", "name": "Metric", "fields": [{"name": "name", "type": "string"},
                                                                   {"name": "value", "type": "double"}]}}}]},
            {"type": "record", "name": "TaskStarted", "fields": [
                {"name": "taskType", "type": "string"}, {"name": "taskIndex", "type": "int"},
                {"name": "host", "type": "string"}, {"name": "containerID", "type": ["null", "string"]}]},
            {"type": "record", "name": "TaskFinished", "fields": [
                {"name": "taskType", "type": "string"}, {"name": "taskIndex", "type": "int"},
                {"name": "status", "type": "string"}, {"name": "metrics", "type": {"type": "array", "items": "Metric"}},
                {"name": "containerDiagnostic", "type": ["null", "string"]}]}]},
        {"name": "timestamp", "type": "long"}]}
