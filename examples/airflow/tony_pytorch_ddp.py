"""An Airflow DAG that trains examples/pytorch_ddp (two workers, DistributedDataParallel) on YARN
with TonyOperator. Copy it into your dags folder and change the paths: src_dir, conf_file and
python_binary_path must exist on the YARN nodes' side as TonY-py ships them (see the README's
"From Airflow")."""

from datetime import datetime
from pathlib import Path

from airflow.sdk import DAG

from tony_py.airflow import TonyOperator

REPO = Path(__file__).resolve().parents[2]  # this checkout; use your own paths

with DAG("tony_pytorch_ddp", schedule=None, start_date=datetime(2025, 1, 1), catchup=False, tags=["tony-py"]):
    TonyOperator(
        task_id="train",
        src_dir=str(REPO / "examples" / "pytorch_ddp"),
        executes="train.py",
        conf_file=str(REPO / "examples" / "pytorch_ddp" / "tony.xml"),
        python_binary_path=str(REPO / ".venv" / "bin" / "python"),  # the job's python: PyTorch is there
        task_params="--epochs 15",
        conf={"tony.application.name": "airflow-digits"},  # keys win over conf_file's, as --conf does
        retries=2,  # used only when the cluster failed the job (preemption, a lost node, the AM lost)
        deferrable=True,  # the worker slot is free while the job trains; a triggerer follows it
    )
