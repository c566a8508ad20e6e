"""Where TonY-py's own files are: the source checkout, the built jar, caches.

TonY-py is used from a checkout (`pip install -e .`): the JVM jar is built by Maven into
`target/`, and the local cluster's config templates live in `docker/hadoop-cluster/`.
"""

from __future__ import annotations

import os
from pathlib import Path

import tony_py
from tony_py.errors import SetupError

PACKAGE_DIR = Path(tony_py.__file__).resolve().parent
SOURCE_ROOT = PACKAGE_DIR.parent
CLUSTER_DEFINITION_DIR = SOURCE_ROOT / "docker" / "hadoop-cluster"


def cache_dir() -> Path:
    """Per-user cache for resolved Hadoop jars and content hashes."""
    base = os.environ.get("TONY_PY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tony-py"
    )
    path = Path(base)
    path.mkdir(parents=True, exist_ok=True)
    return path


def default_cluster_workdir(kind: str = "processes") -> Path:
    """Where `tony cluster up` keeps a cluster's state when no --workdir is given."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "tony-py" / ("docker-cluster" if kind == "docker" else "cluster")


def locate_jar() -> Path:
    """The tony-py jar with the ApplicationMaster and the client bridge.

    TONY_PY_JAR wins; otherwise the jar Maven built in the checkout's target/.
    """
    env = os.environ.get("TONY_PY_JAR")
    if env:
        path = Path(env)
        if not path.is_file():
            raise SetupError(f"TONY_PY_JAR={env} does not exist")
        return path
    candidates = sorted((SOURCE_ROOT / "target").glob("tony-py-*.jar"))
    candidates = [c for c in candidates if not c.name.startswith("original-")]
    if not candidates:
        raise SetupError(
            "the tony-py jar is not built: run `mvn -q package -DskipTests` in "
            f"{SOURCE_ROOT} (scripts/bootstrap does this)"
        )
    return candidates[-1]
