"""The node image of the Docker cluster, built from Debian's packages with no image registry.

`mmdebstrap` makes a Debian root file system with what a Hadoop node of this cluster runs (a
JRE for the daemons and the AM, python3 for TonY-py's AM and executors, iptables for fault
tests) and `docker import` turns it into an image. The tag is the hash of this recipe, so an
image is built once per recipe and reused by every later `up`; Hadoop's jars, the cluster's
config and the job's Python are not in the image (they are mounted: docker.py).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import threading
import time

from tony_py import paths
from tony_py.errors import SetupError

SUITE = "bookworm"
MIRROR_ENV = "TONY_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# libstdc++6 and libgomp1: what TensorFlow's and PyTorch's wheels link against (the job's Python is
# the host's, mounted read-only: docker.py).
PACKAGES = ("openjdk-17-jre-headless", "python3", "iptables", "procps", "iproute2", "libstdc++6", "libgomp1")
JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
# Documentation and translations are of no use in a test node; leaving them out saves ~40 MB.
_EXCLUDES = ("/usr/share/doc/*", "/usr/share/man/*", "/usr/share/locale/*", "/usr/share/info/*")
REPOSITORY = "tony-py-node"
_BUILDING = threading.Lock()  # callers in one process share one build (the serial test run starts it early)


def recipe() -> str:
    """What decides the image's content: the build's own arguments (not the mirror it reads)."""
    return "\n".join([*_mmdebstrap_command(""), JAVA_HOME])


def image_tag() -> str:
    return f"{REPOSITORY}:{hashlib.sha256(recipe().encode()).hexdigest()[:12]}"


def _mmdebstrap_command(mirror: str) -> list[str]:
    cmd = ["mmdebstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", "--aptopt=Acquire::Retries \"3\""]
    cmd += [f"--dpkgopt=path-exclude={pattern}" for pattern in _EXCLUDES]
    # openjdk's postinst links its man page into man1 (update-alternatives), which the excludes
    # above would leave missing: the postinst fails without the directory.
    cmd += ['--essential-hook=mkdir -p "$1/usr/share/man/man1"']
    return cmd + [SUITE, "-", mirror]


def ensure_image(log=print) -> str:
    """The image's tag, building it first if this Docker engine does not have it (a build already
    under way, in this process or another of this user's, is waited for, not repeated: the
    parallel test workers and a `tony cluster up --docker` beside them)."""
    lock_path = paths.cache_dir() / "node-image.lock"
    with _BUILDING, open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_image(log)


def _ensure_image(log) -> str:
    tag = image_tag()
    if subprocess.run(["docker", "image", "inspect", tag], capture_output=True).returncode == 0:
        return tag
    if not shutil.which("mmdebstrap"):
        raise SetupError("building the node image needs mmdebstrap (Debian: apt-get install mmdebstrap; "
                         "scripts/docker-engine installs it)")
    mirror = os.environ.get(MIRROR_ENV) or DEFAULT_MIRROR
    log(f"building the node image {tag} from Debian {SUITE} ({mirror}); once per recipe, about a minute")
    started = time.monotonic()
    build = subprocess.Popen(_mmdebstrap_command(mirror), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    imported = subprocess.run(["docker", "import", "--change", f"ENV JAVA_HOME={JAVA_HOME}", "-", tag],
                              stdin=build.stdout, capture_output=True, text=True)
    build.stdout.close()
    build_err = build.stderr.read().decode(errors="replace")
    if build.wait() != 0:
        subprocess.run(["docker", "image", "rm", "-f", tag], capture_output=True)
        tail = "\n".join(build_err.strip().splitlines()[-10:])
        raise SetupError(f"mmdebstrap could not build the node image (set {MIRROR_ENV} for another Debian "
                         f"mirror):\n{tail}")
    if imported.returncode != 0:
        raise SetupError(f"docker import failed: {imported.stderr.strip()[-500:]}")
    log(f"node image {tag} built in {time.monotonic() - started:.0f} s")
    return tag
