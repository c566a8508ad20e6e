"""The jar's driver (io.tonypy.cli.Submit), compiled on its own (it needs nothing but the JDK)
and run as `hadoop jar` runs it, and the Python client it starts: what they say when they
cannot go on. No cluster, no Maven."""

import hashlib
import io
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from tony_py.bridge.gateway import JvmLaunch
from tony_py.bridge.jvm import java_executable
from tony_py.errors import SetupError

SOURCE = Path(__file__).resolve().parents[2] / "jvm" / "src" / "main" / "java" / "io" / "tonypy" / "cli" / "Submit.java"


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> Path:
    if not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("needs a JDK")
    out = tmp_path_factory.mktemp("driver")
    subprocess.run(["javac", "--release", "8", "-sourcepath", str(SOURCE.parents[3]), "-d", str(out), str(SOURCE)],
                   check=True, capture_output=True,
                   timeout=120)
    return out


def drive(classpath: Path, cache: Path, *args: str, marker: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "TONY_PY_CACHE": str(cache), "MARKER": str(marker or cache / "marker")}
    env.pop("TONY_CLIENT_PYTHON", None)
    cache.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["java", "-cp", str(classpath), "io.tonypy.cli.Submit", *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=cache.parent)  # (not a checkout: its tony_py)


def jar_of(classes: Path, path: Path, extra: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for f in classes.rglob("*.class"):
            zf.write(f, str(f.relative_to(classes)))
        for name, data in extra.items():
            zf.writestr(name, data)
    return path


SUBMIT = "import os, pathlib\npathlib.Path(os.environ['MARKER']).write_text({!r})\n"


def runtime_entries() -> dict[str, bytes]:
    """A bundled runtime whose `python -m tony_py.submit` only writes $MARKER ("bundled"),
    and its hash."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("tony_py/__init__.py", "")
        zf.writestr("tony_py/submit.py", SUBMIT.format("bundled"))
    return {"tony_py_runtime.zip": buf.getvalue(),
            "tony_py_runtime.sha256": hashlib.sha256(buf.getvalue()).hexdigest().encode()}


def shaded_jar(classes: Path, tmp_path: Path) -> Path:
    return jar_of(classes, tmp_path / "tony-py-0.1.0.jar", {**runtime_entries(), "py4j/GatewayServer.class": b""})


def plant(cache: Path) -> Path:
    """What another user (or a cache open to everyone) left where the driver looks."""
    digest = runtime_entries()["tony_py_runtime.sha256"].decode()
    runtime = cache / f"runtime-{digest[:20]}"
    (runtime / "tony_py").mkdir(parents=True)
    (runtime / "tony_py" / "__init__.py").write_text("")
    (runtime / "tony_py" / "submit.py").write_text(SUBMIT.format("planted"))
    return runtime


def test_client_python_given_after_hadoop_jar_is_the_one_used(classes, tmp_path):
    """`hadoop jar X.jar -Dtony.client.python=…` arrives as a program argument: it became
    `--conf tony.client.python=…` and the driver's own advice did not work."""
    run = drive(classes, tmp_path, "-Dtony.client.python=/nonexistent/python3", "--executes", "x.py")
    assert run.returncode == 2
    assert "tried /nonexistent/python3)" in run.stderr, run.stderr


def test_the_jar_before_shading_says_what_is_wrong(classes, tmp_path):
    """Maven's original-*.jar has the runtime but not py4j: the client failed with
    "invalid literal for int()" when its JVM could not start py4j's GatewayServer."""
    jar = jar_of(classes, tmp_path / "original-tony-py-0.1.0.jar", runtime_entries())
    run = drive(jar, tmp_path / "cache", "--executes", "x.py")
    assert run.returncode == 2
    assert "original-tony-py-0.1.0.jar is not the complete tony-py jar: it has no py4j" in run.stderr, run.stderr


def test_the_runtime_is_unpacked_into_a_private_cache_and_run(classes, tmp_path):
    jar, cache, marker = shaded_jar(classes, tmp_path), tmp_path / "home" / "tony-py", tmp_path / "ran"
    old = os.umask(0o022)
    try:
        run = drive(jar, cache, f"-Dtony.client.python={sys.executable}", "--executes", "x.py", marker=marker)
    finally:
        os.umask(old)
    assert run.returncode == 0, run.stderr
    assert marker.read_text() == "bundled" and oct(cache.stat().st_mode & 0o777) == "0o700"


@pytest.mark.parametrize("opened", ["runtime", "cache"])
def test_a_runtime_others_could_write_is_never_run(classes, tmp_path, opened):
    """With TONY_PY_CACHE on a shared path, an existing runtime-<hash> was trusted as is: code
    execution as the submitter for whoever could write there."""
    jar, cache, marker = shaded_jar(classes, tmp_path), tmp_path / "cache", tmp_path / "ran"
    cache.mkdir(mode=0o700)
    runtime = plant(cache)
    (runtime if opened == "runtime" else cache).chmod(0o777)
    run = drive(jar, cache, f"-Dtony.client.python={sys.executable}", "--executes", "x.py", marker=marker)
    assert run.returncode == 2 and "is writable by other users" in run.stderr, run.stderr
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory to another user needs root")
def test_a_runtime_another_user_owns_is_never_run(classes, tmp_path):
    jar, cache, marker = shaded_jar(classes, tmp_path), tmp_path / "cache", tmp_path / "ran"
    cache.mkdir(mode=0o700)
    runtime = plant(cache)
    os.chown(runtime, 4242, 4242)
    run = drive(jar, cache, f"-Dtony.client.python={sys.executable}", "--executes", "x.py", marker=marker)
    assert run.returncode == 2 and f"the unpacked runtime {runtime} belongs to another user" in run.stderr, run.stderr
    assert not marker.exists()


def test_a_jar_without_py4j_is_named_not_an_int_parse_error(tmp_path, monkeypatch):
    """Maven's original-*.jar (the copy before shading) has no py4j: the client's JVM ends at
    once and py4j only said "invalid literal for int() with base 10: b''"."""
    try:
        java_executable()
    except SetupError:
        pytest.skip("needs a JDK")
    jar = tmp_path / "original-tony-py-0.1.0.jar"
    with zipfile.ZipFile(jar, "w") as zf:
        zf.writestr("io/tonypy/client/Nothing.txt", "")
    monkeypatch.setenv("TONY_PY_JAR", str(jar))
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    monkeypatch.setenv("TONY_HADOOP_CLASSPATH", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the JVM's log, kept after a failure
    with pytest.raises(SetupError) as err:
        JvmLaunch().result()
    assert "invalid literal" not in str(err.value)
    assert f"{jar} is not the complete tony-py jar: it has no py4j" in str(err.value)
