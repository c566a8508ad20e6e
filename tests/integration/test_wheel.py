"""TonY-py as a user installs it on a gateway: the wheel built from this checkout (`uv build
--wheel`, Maven once, the jar inside), installed into a fresh venv that has nothing else of
ours, used from a directory far from the checkout: `tony jar-path`, a job submitted with the
venv's own `tony` whose tasks run the venv's own Python, and `hadoop jar` with the wheel's jar.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

from support import JOBS, PYTHON, ROOT, app_id_in, probe_records
from tony_py.cluster.jars import ensure_hadoop_jars

UV = str(Path(PYTHON).with_name("uv"))


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory) -> Path:
    """A venv with the wheel installed (its dependencies from PyPI, as a user's pip would)."""
    out = tmp_path_factory.mktemp("wheel")
    built = subprocess.run([UV, "build", "--wheel", "-o", str(out / "dist"), str(ROOT)], capture_output=True,
                           text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = (out / "dist").glob("tony_py-*-py3-none-any.whl")
    venv = out / "venv"
    subprocess.run([UV, "venv", "-q", "--python", PYTHON, str(venv)], check=True, timeout=120)
    installed = subprocess.run([UV, "pip", "install", "-q", "--python", str(venv / "bin" / "python"), str(wheel)],
                               capture_output=True, text=True, timeout=600)
    assert installed.returncode == 0, installed.stderr[-3000:]
    return venv


def in_venv(venv: Path, cwd: Path, *args: str, env: dict | None = None, timeout: float = 300):
    """A command of the venv, run as a user would: elsewhere, with nothing of the checkout on the path."""
    clean = {k: v for k, v in (env or os.environ).items() if k not in ("PYTHONPATH", "TONY_PY_JAR", "VIRTUAL_ENV")}
    clean["PATH"] = f"{venv / 'bin'}:{clean.get('PATH', '/usr/bin:/bin')}"
    return subprocess.run(list(args), cwd=cwd, env=clean, capture_output=True, text=True, timeout=timeout)


def test_the_wheel_carries_the_jar_and_the_cluster_definition(wheel_venv, tmp_path):
    shown = in_venv(wheel_venv, tmp_path, "tony", "jar-path")
    assert shown.returncode == 0, shown.stderr
    jar = Path(shown.stdout.strip())
    assert jar.is_relative_to(wheel_venv) and jar.name == "tony-py.jar", jar
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert {"io/tonypy/am/ApplicationMaster.class", "io/tonypy/cli/Submit.class", "tony_py_runtime.zip"} <= names
    where = in_venv(wheel_venv, tmp_path, "python", "-c",
                    "from tony_py import paths; print(paths.PACKAGE_DIR); print(paths.CLUSTER_DEFINITION_DIR); "
                    "print(paths.build_property('hadoop.version'))")
    package, definition, version = where.stdout.split()
    assert Path(package).is_relative_to(wheel_venv) and not Path(package).is_relative_to(ROOT), package
    assert Path(definition, "conf", "yarn-site.xml").is_file() and Path(definition).is_relative_to(wheel_venv)
    assert version == ensure_hadoop_jars().parent.name.removeprefix("hadoop-")
    # what every job ships of tony_py (the runtime zip) leaves the 2.6 MB jar out
    shipped = in_venv(wheel_venv, tmp_path, "python", "-c", "from tony_py.client.staging import package_entries; "
                      "print(sorted({a.split('/')[1] for a, _ in package_entries(('tony_py',)) if a.count('/') > 1}))")
    assert "_bundled" not in shipped.stdout and "'am'" in shipped.stdout, shipped.stdout + shipped.stderr


def test_a_job_submitted_with_the_wheels_tony_runs_on_the_venvs_python(wheel_venv, cluster, tmp_path):
    python = str(wheel_venv / "bin" / "python")
    run = in_venv(wheel_venv, tmp_path, "tony", "submit", "--src_dir", str(JOBS), "--executes", "probe.py",
                  "--python_binary_path", python, "--task_params", f"--out {tmp_path / 'probe'}",
                  "--conf", "tony.worker.instances=2", "--conf", "tony.am.memory=512m",
                  "--conf", "tony.worker.memory=512m", env=cluster.env())
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "finished: SUCCEEDED" in run.stdout
    records = probe_records(tmp_path)
    assert sorted(records) == ["worker:0", "worker:1"], sorted(records)
    assert all(r["executable"] == python for r in records.values()), [r["executable"] for r in records.values()]


def test_hadoop_jar_with_the_wheels_jar(wheel_venv, cluster, tmp_path):
    """`hadoop jar "$(tony jar-path)" …` as the hadoop script runs it (RunJar, CLASSPATH)."""
    jar = in_venv(wheel_venv, tmp_path, "tony", "jar-path").stdout.strip()
    java = shutil.which("java", path=f"{os.environ.get('JAVA_HOME', '/nonexistent')}/bin") or "java"
    lib = ensure_hadoop_jars()
    env = cluster.env(CLASSPATH=f"{cluster.conf_dir}:{lib}/*")
    run = subprocess.run([java, "org.apache.hadoop.util.RunJar", jar, "-executes", "probe.py", "-src_dir", str(JOBS),
                          "-python_binary_path", PYTHON, "-task_params", f"--out {tmp_path / 'probe'}",
                          "-conf", "tony.am.memory=512m"], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert app_id_in(run.stdout) and len(probe_records(tmp_path)) == 1, run.stdout[-3000:]
