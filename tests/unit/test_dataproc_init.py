"""The Dataproc initialization action, run here with Dataproc's tools faked: metadata from a
dict, gsutil as cp. It installs the jar, the sample job and its venv zip on the master only."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "dataproc" / "tony-py-init.sh"


def run_init(tmp_path, metadata: dict) -> subprocess.CompletedProcess:
    fake = tmp_path / "bin"
    fake.mkdir(exist_ok=True)
    (fake / "get_metadata_value").write_text(
        "#!/bin/sh\ncase \"$1\" in\n" + "".join(f"  attributes/{k}) echo '{v}';;\n" for k, v in metadata.items())
        + "  *) exit 1;;\nesac\n")
    (fake / "gsutil").write_text("#!/bin/sh\n[ \"$1\" = -m ] && shift\nshift\nexec cp \"$@\"\n")  # gsutil [-m] cp ARGS
    for f in fake.iterdir():
        f.chmod(0o755)
    env = dict(os.environ, PATH=f"{fake}:{os.environ['PATH']}", TONY_PY_GET_METADATA=str(fake / "get_metadata_value"),
               TONY_PY_INSTALL_DIR=str(tmp_path / "opt"), TONY_PY_PYTHON=sys.executable)
    return subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=120)


def test_the_master_gets_the_jar_a_sample_job_and_its_venv(tmp_path):
    jar = tmp_path / "tony-py-0.1.0.jar"
    jar.write_bytes(b"PK\x05\x06" + b"\0" * 18)
    done = run_init(tmp_path, {"dataproc-role": "Master", "tony-py-jar": str(jar),
                               "tony-py-examples": str(ROOT / "examples"), "tony-py-venv-packages": "none"})
    assert done.returncode == 0, done.stderr
    opt = tmp_path / "opt"
    assert (opt / "tony-py.jar").read_bytes() == jar.read_bytes()
    assert (opt / "jobs/TFJob/src/multi_worker.py").exists() and (opt / "jobs/TFJob/tony.xml").exists()
    with zipfile.ZipFile(opt / "deps/tf.zip") as zf:
        assert "tf/bin/python3" in zf.namelist()  # --python_venv=deps/tf.zip --python_binary_path=tf/bin/python3


@pytest.mark.parametrize("metadata,rc", [({"dataproc-role": "Worker"}, 0), ({"dataproc-role": "Master"}, 1)])
def test_workers_need_nothing_and_the_jar_is_required(tmp_path, metadata, rc):
    done = run_init(tmp_path, metadata)
    assert done.returncode == rc, done.stderr
    assert not (tmp_path / "opt" / "tony-py.jar").exists()
