"""Resolve the Hadoop daemon jars from Maven Central, once per version.

The version is the `hadoop.version` property of the root pom.xml (one place). Maven does the
resolution (transitive dependencies, checksums, its own ~/.m2 cache); the resulting flat lib
dir is cached under ~/.cache/tony-py/hadoop-<version>/ so later `up`s do not run Maven.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tony_py import hadoop_support, paths
from tony_py.errors import SetupError

_COMPLETE_MARKER = ".complete"


def pinned_hadoop_version() -> str:
    return os.environ.get("TONY_HADOOP_VERSION") or paths.build_property("hadoop.version")


def cluster_version(asked: str | None) -> str:
    """The Hadoop release a new local cluster runs: the one asked for (`--hadoop-version`), else
    the pinned one; refused when TonY-py does not support it (hadoop_support.OLDEST)."""
    version = asked or pinned_hadoop_version()
    hadoop_support.check_supported(version, "--hadoop-version" if asked else "the Hadoop version")
    return version


def _run_maven(pom: Path, out: Path, properties: dict[str, str]) -> None:
    mvn = shutil.which("mvn")
    if not mvn:
        raise SetupError("Maven (mvn) is needed once to fetch the Hadoop jars; install it")
    cmd = [mvn, "-q", "-B", "-f", str(pom)]
    cmd += [f"-D{k}={v}" for k, v in properties.items()]
    cmd += ["dependency:copy-dependencies", f"-DoutputDirectory={out}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise SetupError(f"Maven could not resolve the jars of {pom}:\n{tail}")


def ensure_hadoop_jars(version: str | None = None) -> Path:
    """Return a directory holding every jar the daemons need, fetching it on first use."""
    version = version or pinned_hadoop_version()
    return _ensure_lib(paths.CLUSTER_DEFINITION_DIR / "pom.xml", f"hadoop-{version}/lib", {
        "hadoop.version": version,
        "distributedshell.version": paths.build_property("distributedshell.version"),
    })


def ensure_kdc_jars(version: str | None = None) -> Path:
    """The local KDC's jars (Hadoop's MiniKdc at the cluster's version), fetched on first use."""
    version = version or pinned_hadoop_version()
    return _ensure_lib(paths.CLUSTER_DEFINITION_DIR / "kdc" / "pom.xml", f"hadoop-{version}/kdc-lib",
                       {"hadoop.version": version})


def _ensure_lib(pom: Path, name: str, properties: dict[str, str]) -> Path:
    lib = paths.cache_dir() / name
    if (lib / _COMPLETE_MARKER).exists():
        return lib
    lib.parent.mkdir(parents=True, exist_ok=True)
    # Resolve into a temp dir and rename, so an interrupted download is never mistaken for
    # a complete one.
    tmp = Path(tempfile.mkdtemp(prefix="lib-", dir=lib.parent))
    try:
        _run_maven(pom, tmp, properties)
        (tmp / _COMPLETE_MARKER).write_text(properties["hadoop.version"] + "\n")
        if lib.exists():
            shutil.rmtree(lib)
        tmp.rename(lib)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return lib


def own_distributedshell_jar(version: str) -> Path:
    """The distributed shell of that release line (the cluster's lib holds the newest Maven
    Central has, 3.4.2's, for every release, and 3.4.2's client does not run on 3.3's jars): the
    release's own, else the newest earlier patch release of its line a registry serves (3.3.6's
    is not served here, 3.3.5's is). A benchmark's floor on an older cluster."""
    major, minor, patch = hadoop_support.parse(version) or (0, 0, 0)
    lib = paths.cache_dir() / f"hadoop-{version}" / "distributedshell"
    found = sorted(lib.glob("hadoop-yarn-applications-distributedshell-*.jar"))
    if found:
        return found[-1]
    mvn = shutil.which("mvn")
    if not mvn:
        raise SetupError("Maven (mvn) is needed once to fetch the distributed shell; install it")
    lib.mkdir(parents=True, exist_ok=True)
    for candidate in (f"{major}.{minor}.{p}" for p in range(patch, -1, -1)):
        artifact = f"org.apache.hadoop:hadoop-yarn-applications-distributedshell:{candidate}"
        proc = subprocess.run([mvn, "-q", "-B", "dependency:copy", f"-Dartifact={artifact}",
                               f"-DoutputDirectory={lib}"], capture_output=True, text=True)
        jar = lib / f"hadoop-yarn-applications-distributedshell-{candidate}.jar"
        if proc.returncode == 0 and jar.is_file():
            return jar
    raise SetupError(f"no registry serves a distributed shell of Hadoop {major}.{minor}.0-{version}")


def distributedshell_jar(lib: Path) -> Path:
    jars = sorted(lib.glob("hadoop-yarn-applications-distributedshell-*.jar"))
    if not jars:
        raise SetupError(f"no distributed-shell jar in {lib}")
    return jars[-1]
