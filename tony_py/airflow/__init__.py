"""TonY-py for Apache Airflow (the `airflow` extra): `from tony_py.airflow import TonyOperator`.

Only operator.py and trigger.py import airflow, and only when asked for: rules.py, follow.py and
provider.py load without it (the unit tests run them in a venv without Airflow).
"""

from __future__ import annotations

__all__ = ["TonyOperator", "TonyTrigger"]


def __getattr__(name: str):
    if name == "TonyOperator":
        from tony_py.airflow.operator import TonyOperator

        return TonyOperator
    if name == "TonyTrigger":
        from tony_py.airflow.trigger import TonyTrigger

        return TonyTrigger
    raise AttributeError(name)
