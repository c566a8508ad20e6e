"""DAGs for tests/integration/test_airflow.py: a TonY-py probe job (tests/integration/jobs/probe.py)
that succeeds (deferrable), fails with its own exit code (deferrable, retries=2: must not be
retried), or runs until the test kills the task (not deferrable: on_kill). TONY_TEST_PYTHON, TONY_TEST_OUT name the task's python and
the probe's output dir."""

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.sdk import DAG

from tony_py.airflow import TonyOperator

JOBS = str(Path(__file__).resolve().parents[1] / "jobs")
OUT = os.environ.get("TONY_TEST_OUT", "/tmp/tony-airflow-probe")
COMMON = dict(src_dir=JOBS, executes="probe.py", python_binary_path=os.environ.get("TONY_TEST_PYTHON"),
              conf={"tony.application.framework": "standalone", "tony.worker.instances": "1",
                    "tony.worker.memory": "512m", "tony.am.memory": "512m"}, poll_interval=1)


def dag(dag_id: str, params: str, **operator_args) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2024, 1, 1), catchup=False) as d:
        TonyOperator(task_id="train", task_params=f"--out {OUT}/{dag_id} {params}", **COMMON, **operator_args)
    return d


succeeds = dag("tony_succeeds", "--sleep worker:0:3", deferrable=True)
fails = dag("tony_fails", "--fail worker:0:7", deferrable=True, retries=2, retry_delay=timedelta(seconds=1))
killed = dag("tony_killed", "--forever worker:0")
