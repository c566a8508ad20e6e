"""Is there a Docker engine this process can use? One line of why not, when there is none.

Installing docker.io and mmdebstrap and starting dockerd is the scripts' business
(scripts/docker-engine, which scripts/test runs); this module only asks.
"""

from __future__ import annotations

import shutil
import subprocess

from tony_py.errors import SetupError


class DockerUnavailable(SetupError):
    """No usable Docker engine; the message is one line saying why and what to run."""


def check_engine() -> None:
    if not shutil.which("docker"):
        raise DockerUnavailable("no docker command on PATH: run scripts/docker-engine (as root on Debian it "
                                "installs docker.io and mmdebstrap and starts dockerd)")
    try:
        proc = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                              timeout=20)
    except subprocess.TimeoutExpired:
        raise DockerUnavailable("the Docker engine did not answer `docker info` within 20 s") from None
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["no answer"])[-1]
        raise DockerUnavailable(f"no Docker engine answers ({why}): run scripts/docker-engine, or start dockerd")


def engine_available() -> tuple[bool, str]:
    """(usable, why not)."""
    try:
        check_engine()
        return True, ""
    except DockerUnavailable as exc:
        return False, str(exc)
