"""The per-application secret that authenticates executors (and a new AM attempt) to the AM.

The client generates it and stages it as a file readable only by the job's user; YARN
localizes it into the AM's and every task's working directory. Not an environment variable:
YARN copies each container's launch script, environment included, into its logs. Whoever reads
it (the AM, an executor) removes the link from the working dir, so the user process does not
find it lying around either.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

SECRET_FILE = "tony-secret"


def generate() -> str:
    return secrets.token_hex(32)


def write(path: Path, value: str) -> None:
    """Create a secret file readable by its owner only, atomically with its mode (O_EXCL: never
    through an existing file or link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)


def take(cwd: Path | None = None) -> str:
    """Read the localized secret and remove its link from the working dir."""
    path = (cwd or Path.cwd()) / SECRET_FILE
    value = path.read_text().strip()
    try:
        path.unlink()
    except OSError:
        pass
    if len(value) < 32:
        raise RuntimeError(f"{path} does not hold a usable secret")
    return value
