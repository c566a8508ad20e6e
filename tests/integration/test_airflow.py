"""TonyOperator under real Apache Airflow (.venv-airflow, from PyPI; SQLite metadata DB, one
AIRFLOW_HOME migrated once for the module), with `airflow dags test` on the cluster: Airflow
discovers the provider; a deferred run succeeds and pushes its app id and final status to XCom;
a deferred run fails with the root cause in the task log and is not retried (retries=2); a run
killed mid-run (SIGTERM to the task process, which calls on_kill) leaves no application.
DAGs: tests/integration/airflow_dags/tony_dags.py."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time

import pytest

from support import PYTHON, ROOT, wait_clean, wait_for

AIRFLOW = ROOT / ".venv-airflow" / "bin" / "airflow"
DAGS = ROOT / "tests" / "integration" / "airflow_dags"


@pytest.fixture(scope="module")
def airflow(cluster, tmp_path_factory):
    """Run the `airflow` CLI of .venv-airflow against one migrated SQLite DB."""
    if not AIRFLOW.exists():
        pytest.fail(f"{AIRFLOW} is missing: scripts/bootstrap creates it (scripts/bootstrap --airflow alone)")
    home = tmp_path_factory.mktemp("airflow-home")
    env = cluster.env(AIRFLOW_HOME=str(home), AIRFLOW__CORE__DAGS_FOLDER=str(DAGS),
                      AIRFLOW__CORE__LOAD_EXAMPLES="False", TONY_TEST_PYTHON=PYTHON,
                      TONY_TEST_OUT=str(home / "probe"))

    def run(*args: str, timeout: float = 120, wait: bool = True):
        log = open(home / f"{'-'.join(args)}.log", "w+")
        proc = subprocess.Popen([str(AIRFLOW), *args], env=env, cwd=home, stdout=log, stderr=subprocess.STDOUT,
                                text=True)
        if not wait:
            return proc, log
        with log:
            try:
                proc.wait(timeout=timeout)
            finally:
                if proc.poll() is None:
                    proc.kill()
            log.seek(0)
            return proc.returncode, log.read()

    code, out = run("db", "migrate")
    assert code == 0, out[-3000:]
    run.home = home
    return run


def xcoms(home, dag_id: str) -> dict:
    with sqlite3.connect(home / "airflow.db") as db:
        return {k: json.loads(v) for k, v in db.execute(
            "SELECT key, value FROM xcom WHERE dag_id = ? AND task_id = 'train'", (dag_id,))}


def tries(home, dag_id: str) -> list[tuple[str, int]]:
    with sqlite3.connect(home / "airflow.db") as db:
        return list(db.execute("SELECT state, try_number FROM task_instance WHERE dag_id = ?", (dag_id,)))


def test_airflow_discovers_the_provider(airflow):
    code, out = airflow("providers", "list", "-o", "json")
    assert code == 0, out[-3000:]
    providers = {p["package_name"]: p for p in json.loads(out[out.index("["):])}
    assert "tony-py" in providers, sorted(providers)


def test_a_deferred_dag_run_succeeds_and_pushes_app_id_and_status(airflow, cluster):
    code, out = airflow("dags", "test", "tony_succeeds")
    assert code == 0, out[-5000:]
    assert "Pausing task as DEFERRED" in out and "TonyTrigger" in out  # followed by the trigger
    assert "worker:0       RUNNING" in out and "worker:0       SUCCEEDED" in out  # the task table
    pushed = xcoms(airflow.home, "tony_succeeds")
    assert pushed["final_status"] == "SUCCEEDED" and pushed["return_value"] == pushed["app_id"]
    assert cluster.app(pushed["app_id"])["finalStatus"] == "SUCCEEDED"
    assert tries(airflow.home, "tony_succeeds") == [("success", 1)]


def test_a_failed_dag_run_logs_the_root_cause_and_is_not_retried(airflow, cluster):
    code, out = airflow("dags", "test", "tony_fails")
    assert code == 1 and "DagRun failed" in out, out[-5000:]  # `airflow dags test`'s own failure
    assert "Root cause: worker:0 (attempt 0 on " in out and "exit code 7" in out, out[-5000:]
    assert "probe worker:0 failing on purpose with exit code 7" in out  # the stderr tail
    assert "the job failed (exit_code)" in out and "not retried" in out
    assert out.count("submitted application_") == 1  # retries=2, yet one submit
    assert tries(airflow.home, "tony_fails") == [("failed", 1)]
    pushed = xcoms(airflow.home, "tony_fails")
    assert pushed["final_status"] == "FAILED" and cluster.app(pushed["app_id"])["finalStatus"] == "FAILED"


def test_a_dag_run_killed_mid_run_leaves_no_application(airflow, cluster):
    record = airflow.home / "probe" / "tony_killed" / "worker:0.json"
    proc, log = airflow("dags", "test", "tony_killed", wait=False)
    try:
        wait_for(record.exists, 90, "the job's task to start")
        app_id = json.loads(record.read_text())["JOB_ID"]
        assert cluster.app(app_id)["state"] == "RUNNING"
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)  # what a worker does to a killed task: Airflow calls on_kill
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    with log:
        log.seek(0)
        out = log.read()
    assert f"killing {app_id}" in out, out[-5000:]
    assert cluster.app(app_id)["state"] == "KILLED"
    assert xcoms(airflow.home, "tony_killed")["final_status"] == "KILLED"
    assert tries(airflow.home, "tony_killed") == [("failed", 1)]
    left = wait_clean(cluster, timeout=60)
    assert not left["apps"] and not left["staging"], left
    print(f"killed and gone {time.monotonic() - started:.1f} s after SIGTERM")


KILL_RACES = """
import sys
from tony_py import api
from tony_py.airflow.operator import TonyOperator


class Job:  # what api.submit and api.attach hand back, reduced to what the operator touches
    app_id, tracking_url, warnings, report = "application_1_0001", None, [], {"state": "RUNNING"}
    kills = []

    def kill(self, reason): Job.kills.append(reason)
    def refresh(self): return self.report
    def close(self): pass
    def __enter__(self): return self
    def __exit__(self, *exc): pass


op = TonyOperator(task_id="train", executes="train.py")
if sys.argv[1] == "kill-during-submit":
    def submit(**kwargs):
        op.on_kill()  # the task's SIGTERM while the submit is still under way: no job to kill yet
        return Job()
    api.submit = submit
    try:
        op.execute({"ti": None})
    except Exception as exc:
        print("raised", type(exc).__name__)
else:  # the trigger lost track of the application: a retry must not run beside it
    api.attach = lambda app_id: Job()
    try:
        op.execute_complete({"ti": None}, {"app_id": "application_1_0001", "error": "no RM for 120 s"})
    except Exception as exc:
        print("raised", type(exc).__name__)
print("kills", len(Job.kills))
"""


@pytest.mark.parametrize("race,raised", [("kill-during-submit", "AirflowFailException"),
                                          ("trigger-lost-track", "AirflowException")])
def test_the_application_is_killed_whenever_the_operator_lets_go_of_it(race, raised, tmp_path):
    """Real Airflow classes, a stand-in for the job: a kill that came before there was a job to
    kill, and a trigger that lost the RM, each kill the application once before the task ends."""
    if not AIRFLOW.exists():
        pytest.fail(f"{AIRFLOW} is missing: scripts/bootstrap creates it (scripts/bootstrap --airflow alone)")
    script = tmp_path / "races.py"
    script.write_text(KILL_RACES)
    run = subprocess.run([str(AIRFLOW.parent / "python"), str(script), race], capture_output=True, text=True,
                         timeout=120, env={"PATH": "/usr/bin:/bin", "AIRFLOW_HOME": str(tmp_path),
                                           "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    assert f"raised {raised}\nkills 1" in run.stdout, run.stdout + run.stderr[-3000:]
