"""Hadoop's native library (libhadoop.so) for the secure cluster's NodeManagers.

Under Kerberos a NodeManager opens container logs through SecureIOUtils (log aggregation, its
log pages), which needs libhadoop.so's NativeIO. Apache publishes none on Maven Central; Trino's
`io.trino.hadoop:hadoop-apache` jar carries one built from Hadoop 3.3.5. Maven fetches that jar
(docker/hadoop-cluster/native/pom.xml), and only the .so is taken from it: the jar never goes on a
classpath (it holds shaded 3.3.5 classes). Its sha256 is pinned here and checked on every use.

Against 3.4's classes its NativeIO, getFstat (what SecureIOUtils uses), JNI group mapping and
native CRC work; NativeIO.getOwner does not, and its OpenSSL part does not match 3.4's
OpensslCipher: secure.py keeps the crypto codecs on the JDK's, so that part stays unused.
"""

from __future__ import annotations

import hashlib
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from tony_py import paths
from tony_py.cluster import jars
from tony_py.errors import SetupError

POM = paths.CLUSTER_DEFINITION_DIR / "native" / "pom.xml"
SO_IN_JAR = "nativelib/Linux-amd64/libhadoop.so"
SHA256 = "4eb6b773bba879f77862d6e262f6f5d503342429f07b989409cbe9939eb2c217"
LIB_NAME = "libhadoop.so"


def lib_dir() -> Path:
    """Where the verified libhadoop.so lies (a daemon's java.library.path)."""
    version = paths.pom_property("trino.hadoop.version", POM)
    return paths.cache_dir() / "native" / f"hadoop-apache-{version}"


def ensure_native_lib() -> Path:
    """The directory holding libhadoop.so, fetched on first use and verified on every one."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "amd64"):
        raise SetupError(f"a secure cluster's NodeManagers need Hadoop's native library, which is fetched for "
                         f"Linux x86-64 only (this is {platform.system()} {platform.machine()})")
    target = lib_dir()
    if not (target / LIB_NAME).exists():
        fetch(target)
    verify(target / LIB_NAME)
    return target


def fetch(target: Path) -> None:
    """Maven resolves the jar (its own checksums, ~/.m2); the .so alone is copied out of it."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="native-", dir=target.parent))
    try:
        jars._run_maven(POM, tmp, {})
        found = sorted(tmp.glob("hadoop-apache-*.jar"))
        if not found:
            raise SetupError(f"Maven fetched no hadoop-apache jar for {POM}")
        out = tmp / "lib"
        out.mkdir()
        with zipfile.ZipFile(found[0]) as jar:
            try:
                with jar.open(SO_IN_JAR) as src, open(out / LIB_NAME, "wb") as dst:
                    shutil.copyfileobj(src, dst)
            except KeyError:
                raise SetupError(f"{found[0].name} holds no {SO_IN_JAR}") from None
        verify(out / LIB_NAME)
        shutil.rmtree(target, ignore_errors=True)
        out.rename(target)  # whole or not at all: an interrupted fetch leaves only the temp dir
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def verify(so: Path) -> None:
    """The pinned file, and one this machine's loader can load (its glibc and architecture)."""
    digest = hashlib.sha256(so.read_bytes()).hexdigest()
    if digest != SHA256:
        raise SetupError(f"{so} is not the pinned libhadoop.so (sha256 {digest}, expected {SHA256}): delete "
                         f"{so.parent} and run `tony cluster up --secure` again to fetch it anew")
    # In a child: a library that cannot load must not take this process with it.
    probe = subprocess.run([sys.executable, "-c", "import ctypes, sys; ctypes.CDLL(sys.argv[1])", str(so)],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        reason = (probe.stderr.strip().splitlines() or ["it crashed the loader"])[-1]
        raise SetupError(f"{so} cannot be loaded on this machine ({reason}): a secure cluster's NodeManagers need "
                         "this build of Hadoop's native library, made for Linux x86-64 with glibc; run the "
                         "secure cluster on such a machine")
