"""How a test session's cluster fixtures start their cluster (tests/integration/conftest.py and
the lanes' own conftests)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest


def start_or_say_why(what: str, start, workdir: Path):
    """Start a session's cluster; if it does not come up, fail every test that needs it with one
    line naming the cluster, how long the start took, and why (not a timeout's stack trace: the
    start is not charged to a test's timeout, pyproject.toml's timeout_func_only)."""
    began = time.monotonic()
    try:
        return start()
    except Exception as e:  # noqa: BLE001 - any failure to start is reported the same way
        pytest.fail(f"{what} did not start ({time.monotonic() - began:.0f} s): {type(e).__name__}: {e} "
                    f"(logs in {workdir})", pytrace=False)
