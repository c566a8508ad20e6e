"""The jar's driver (io.tonypy.cli.Submit), compiled on its own (it needs nothing but the JDK)
and run as `hadoop jar` runs it: what it says when it cannot go on. No cluster, no Maven."""

import os
import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest

SOURCE = Path(__file__).resolve().parents[2] / "jvm" / "src" / "main" / "java" / "io" / "tonypy" / "cli" / "Submit.java"


@pytest.fixture(scope="module")
def classes(tmp_path_factory) -> Path:
    if not shutil.which("javac") or not shutil.which("java"):
        pytest.skip("needs a JDK")
    out = tmp_path_factory.mktemp("driver")
    subprocess.run(["javac", "--release", "11", "-d", str(out), str(SOURCE)], check=True, capture_output=True,
                   timeout=120)
    return out


def drive(classpath: Path, cache: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "TONY_PY_CACHE": str(cache)}
    env.pop("TONY_CLIENT_PYTHON", None)
    return subprocess.run(["java", "-cp", str(classpath), "io.tonypy.cli.Submit", *args], capture_output=True,
                          text=True, timeout=60, env=env)


def jar_of(classes: Path, path: Path, extra: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        for f in classes.rglob("*.class"):
            zf.write(f, str(f.relative_to(classes)))
        for name, data in extra.items():
            zf.writestr(name, data)
    return path


def runtime_entries() -> dict[str, bytes]:
    """A bundled runtime the driver can unpack (an empty zip and its hash)."""
    import hashlib
    import io

    buf = io.BytesIO()
    zipfile.ZipFile(buf, "w").close()
    return {"tony_py_runtime.zip": buf.getvalue(),
            "tony_py_runtime.sha256": hashlib.sha256(buf.getvalue()).hexdigest().encode()}


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
