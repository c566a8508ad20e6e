"""What CI refuses (tests/census.py, tests/skips.py, tests/conftest.py), tried on small trees of
tests run by a real pytest with the suite's own conftest: a module skipped at collection, a skip
of a test that needs no hardware, a `gpu` keyword that is not the marker, a file of tests pytest
does not collect, and a run that ran fewer tests than the census holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]
HARNESS = ("conftest.py", "lanes.py", "census.py", "skips.py")

pytestmark = pytest.mark.unit


def tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A checkout-like tree: tmp/tests/ with the suite's own conftest and these test files."""
    tests = tmp_path / "tests"
    (tests / "unit").mkdir(parents=True)
    for name in HARNESS:
        shutil.copy(TESTS / name, tests / name)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n    unit: u\n    integration: i\n")
    for name, text in files.items():
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text(textwrap.dedent(text))
    return tmp_path


def pytest_in(root: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("TONY_TEST_", "PYTEST_"))}
    environment.update(env)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", *args],
                          cwd=root, capture_output=True, text=True, timeout=120, env=environment)


SKIPPED_MODULE = """
    import pytest
    pytest.skip("no widget here", allow_module_level=True)
    def test_widget():
        pass
"""


def test_a_module_skipped_at_collection_fails_the_run(tmp_path):
    root = tree(tmp_path, {"unit/test_ok.py": "def test_ok():\n    pass\n", "unit/test_widget.py": SKIPPED_MODULE})
    assert pytest_in(root, "tests").returncode == 0  # without CI's rule, pytest's own behaviour
    run = pytest_in(root, "tests", TONY_TEST_NO_SKIPS="1")
    assert run.returncode != 0, run.stdout[-2000:]
    assert "skipped at collection (no widget here)" in run.stdout, run.stdout[-2000:]


def test_only_the_gpu_marker_on_a_machine_without_one_excuses_a_skip(tmp_path, monkeypatch):
    files = {"unit/test_gpu.py": """
        import pytest

        @pytest.mark.gpu
        def test_needs_a_gpu():
            pytest.skip("no GPU on this machine")

        @pytest.mark.parametrize("device", ["gpu"])
        def test_merely_named_gpu(device):
            pytest.skip("not hardware")

        @pytest.mark.gpu
        def test_two_devices():
            pytest.skip("needs two GPUs")
    """}
    root = tree(tmp_path, files)
    run = pytest_in(root, "tests", "-k", "needs_a_gpu", TONY_TEST_NO_SKIPS="1", PATH="/usr/bin:/bin")
    assert run.returncode == 0 and "they need hardware this machine lacks" in run.stdout, run.stdout[-2000:]
    run = pytest_in(root, "tests", "-k", "merely_named", TONY_TEST_NO_SKIPS="1", PATH="/usr/bin:/bin")
    assert run.returncode != 0 and "TONY_TEST_NO_SKIPS=1 refuses" in run.stdout, run.stdout[-2000:]
    # where nvidia-smi finds a device, the gpu test's skip is refused too
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H100 (UUID: GPU-x)'\n")
    (fake / "nvidia-smi").chmod(0o755)
    run = pytest_in(root, "tests", "-k", "needs_a_gpu", TONY_TEST_NO_SKIPS="1", PATH=f"{fake}:/usr/bin:/bin")
    assert run.returncode != 0 and "TONY_TEST_NO_SKIPS=1 refuses" in run.stdout, run.stdout[-2000:]
    # a test that needs two GPUs may skip on that one-GPU machine, and only there
    run = pytest_in(root, "tests", "-k", "two_devices", TONY_TEST_NO_SKIPS="1", PATH=f"{fake}:/usr/bin:/bin")
    assert run.returncode == 0 and "they need hardware this machine lacks" in run.stdout, run.stdout[-2000:]
    (fake / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: H100 (UUID: a)'\necho 'GPU 1: H100 (UUID: b)'\n")
    run = pytest_in(root, "tests", "-k", "two_devices", TONY_TEST_NO_SKIPS="1", PATH=f"{fake}:/usr/bin:/bin")
    assert run.returncode != 0 and "TONY_TEST_NO_SKIPS=1 refuses" in run.stdout, run.stdout[-2000:]


def test_the_census_refuses_tests_pytest_would_not_collect_and_module_skips(tmp_path):
    sys.path.insert(0, str(TESTS))
    import census

    root = tree(tmp_path, {"unit/test_ok.py": "def test_a():\n    pass\n\ndef test_b():\n    pass\n",
                           "unit/checks_renamed.py": "def test_lost():\n    pass\n",
                           "unit/test_widget.py": SKIPPED_MODULE,
                           "integration/helpers.py": "def make_thing():\n    pass\n"})
    refused = census.take(tmp_path / "census.json", root / "tests")
    text = "\n".join(refused)
    assert "tests/unit/checks_renamed.py: defines tests but none was collected" in text
    assert "skipped at collection" in text and "no widget here" in text
    assert "helpers.py" not in text  # no test in it: nothing to collect
    lanes = census.load(tmp_path / "census.json")
    assert lanes["unit"] == ["tests/unit/test_ok.py::test_a", "tests/unit/test_ok.py::test_b"]


def test_a_run_that_ran_fewer_tests_than_the_census_fails_and_names_them(tmp_path):
    root = tree(tmp_path, {"unit/test_ok.py": "def test_a():\n    pass\n\ndef test_b():\n    pass\n"})
    manifest = tmp_path / "census.json"
    manifest.write_text(json.dumps({"lanes": {"unit": ["tests/unit/test_ok.py::test_a",
                                                       "tests/unit/test_ok.py::test_b"]}}))
    run = pytest_in(root, "tests", TONY_TEST_MANIFEST=str(manifest))
    assert run.returncode == 0, run.stdout[-2000:]
    run = pytest_in(root, "tests", "-k", "test_a", TONY_TEST_MANIFEST=str(manifest))
    assert run.returncode != 0, run.stdout[-2000:]
    assert "ran fewer tests than the census holds" in run.stdout
    assert "tests/unit/test_ok.py::test_b" in run.stdout


def test_ci_takes_no_selection():
    run = subprocess.run(["bash", str(TESTS.parent / ".ci" / "run"), "-k", "anything"], capture_output=True,
                         text=True, timeout=30)
    assert run.returncode == 2 and "takes no arguments" in run.stderr, run.stderr
