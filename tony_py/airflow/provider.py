"""What Airflow's ProvidersManager reads through the `apache_airflow_provider` entry point
(pyproject.toml): the distribution's name, the operator and the trigger. No airflow import."""

from __future__ import annotations


def get_provider_info() -> dict:
    return {
        "package-name": "tony-py",  # must be the distribution's name: Airflow checks it
        "name": "TonY-py",
        "description": "Distributed TensorFlow, PyTorch and JAX training on Hadoop YARN: TonyOperator "
                       "submits a TonY-py job and follows it (deferrable).",
        "integrations": [{"integration-name": "TonY-py", "external-doc-url": "https://github.com/tony-framework/TonY",
                          "tags": ["software"]}],
        "operators": [{"integration-name": "TonY-py", "python-modules": ["tony_py.airflow.operator"]}],
        "triggers": [{"integration-name": "TonY-py", "python-modules": ["tony_py.airflow.trigger"]}],
    }
