"""Which skips CI accepts (tests/conftest.py): only a test that carries the `gpu` marker itself,
on a machine where `nvidia-smi` finds no device. Everything else a CI machine could run must run.

- The marker is read from the test item (`item.get_closest_marker("gpu")`), not from
  `report.keywords`, where any parametrize id, class or directory named "gpu" would also match.
- The machine is asked once: `nvidia-smi -L` lists its devices (`GPU n:` lines). A skipped `gpu`
  test is refused where a device is there (it was meant to run here), unless its reason says it
  "needs N GPUs" and fewer than N are listed (a two-device test on a one-GPU machine).
- A module skipped at collection is never accepted under TONY_TEST_NO_SKIPS=1: it becomes a
  collection error, so no worker can drop a whole file quietly.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess

NO_SKIPS_ENV = "TONY_TEST_NO_SKIPS"
GPU_PROPERTY = "marked_gpu"


def no_skips() -> bool:
    return os.environ.get(NO_SKIPS_ENV) == "1"


@functools.lru_cache(maxsize=1)
def gpu_count() -> int:
    """How many devices nvidia-smi finds on this machine (0 without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def gpu_present() -> bool:
    return gpu_count() > 0


def mark_gpu_test(item, report) -> None:
    if item.get_closest_marker("gpu") is not None:
        report.user_properties.append((GPU_PROPERTY, True))


def marked_gpu(report) -> bool:
    return any(name == GPU_PROPERTY and value for name, value in report.user_properties)


NEEDS_GPUS = re.compile(r"\bneeds (\d+|two|three|four) GPUs\b")
_WORDS = {"two": 2, "three": 3, "four": 4}


def exempt(marked: bool, reason: str = "") -> bool:
    """A skip CI accepts: a `gpu`-marked test on a machine without a GPU, or one whose reason
    says it "needs N GPUs" on a machine where nvidia-smi finds fewer than N."""
    if not marked:
        return False
    needed = NEEDS_GPUS.search(reason)
    wanted = (_WORDS.get(needed.group(1)) or int(needed.group(1))) if needed else 1
    return gpu_count() < wanted


def refuse_collection_skip(report) -> None:
    """Turn a skipped collection report into a failed one, under TONY_TEST_NO_SKIPS=1."""
    if not (no_skips() and report.skipped):
        return
    longrepr = report.longrepr
    reason = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix("Skipped: ")
    report.outcome = "failed"
    report.longrepr = (f"{report.nodeid} was skipped at collection ({reason}): {NO_SKIPS_ENV}=1 refuses that, "
                       "since every test in it would vanish from the run; skip inside the test, and only "
                       "for missing hardware (a `gpu`-marked test)")
