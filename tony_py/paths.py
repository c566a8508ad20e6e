"""Where TonY-py's own files are: the built jar, the local cluster's definition, caches.

Two ways to have TonY-py, and both find the same things:
- installed from the wheel (`pip install tony_py-*.whl`): the jar, the cluster definition and
  the build's pinned versions are inside the package, in `tony_py/_bundled/` (setup.py puts
  them there when it builds the wheel);
- a checkout (`pip install -e .`, scripts/bootstrap): Maven builds the jar into `target/`, the
  definition is `docker/hadoop-cluster/` and the versions are the root pom.xml's properties.
TONY_PY_JAR names a jar explicitly, whichever way.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import tony_py
from tony_py.errors import SetupError

PACKAGE_DIR = Path(tony_py.__file__).resolve().parent
SOURCE_ROOT = PACKAGE_DIR.parent
BUNDLED_DIR = PACKAGE_DIR / "_bundled"  # only in an installed wheel
_CHECKOUT_DEFINITION = SOURCE_ROOT / "docker" / "hadoop-cluster"
CLUSTER_DEFINITION_DIR = _CHECKOUT_DEFINITION if _CHECKOUT_DEFINITION.is_dir() else BUNDLED_DIR / "hadoop-cluster"


def build_property(name: str) -> str:
    """A version the build pinned (hadoop.version, distributedshell.version, …): the checkout's
    pom.xml, else what the wheel's build recorded."""
    recorded = BUNDLED_DIR / "build.json"
    if not (SOURCE_ROOT / "pom.xml").is_file() and recorded.is_file():
        value = json.loads(recorded.read_text()).get(name)
        if not value:
            raise SetupError(f"{recorded} records no {name!r}: reinstall tony-py")
        return value
    return pom_property(name, SOURCE_ROOT / "pom.xml")


_POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def pom_property(name: str, pom: Path) -> str:
    """A <properties> value of a Maven pom."""
    import defusedxml.ElementTree as ET

    try:
        root = ET.parse(pom).getroot()
    except (OSError, ET.ParseError) as exc:
        raise SetupError(f"cannot read {pom}: {exc}") from exc
    node = root.find(f"m:properties/m:{name}", _POM_NS)
    if node is None or not (node.text or "").strip():
        raise SetupError(f"{pom} has no <{name}> property")
    return node.text.strip()


def cache_dir() -> Path:
    """Per-user cache for resolved Hadoop jars, content hashes, copies of job history (with
    tony-final.xml) and local-mode jobs: private to this user (private_dir)."""
    base = os.environ.get("TONY_PY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "tony-py"
    )
    path = Path(base)
    private_dir(path)
    return path


def default_cluster_workdir(kind: str = "processes") -> Path:
    """Where `tony cluster up` keeps a cluster's state when no --workdir is given."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return Path(base) / "tony-py" / {"docker": "docker-cluster", "secure": "secure-cluster", "ha": "ha-cluster",
                                           "docker-ha": "docker-ha-cluster", "docker-secure": "docker-secure-cluster"}.get(kind, "cluster")


def locate_jar() -> Path:
    """The tony-py jar with the ApplicationMaster and the client bridge.

    TONY_PY_JAR wins; then the jar inside an installed wheel; then the jar Maven built in a
    checkout's target/.
    """
    env = os.environ.get("TONY_PY_JAR")
    if env:
        path = Path(env)
        if not path.is_file():
            raise SetupError(f"TONY_PY_JAR={env} does not exist")
        return path
    bundled = BUNDLED_DIR / "tony-py.jar"
    if bundled.is_file():
        return bundled
    candidates = sorted((SOURCE_ROOT / "target").glob("tony-py-*.jar"))
    candidates = [c for c in candidates if not c.name.startswith("original-")]
    if not candidates:
        if not (SOURCE_ROOT / "pom.xml").is_file():
            raise SetupError(f"this tony-py ({PACKAGE_DIR}) carries no jar: install it from its wheel "
                             "(`pip install tony_py-*.whl`), or set TONY_PY_JAR to the tony-py jar")
        raise SetupError(
            "the tony-py jar is not built: run `mvn -q package -DskipTests` in "
            f"{SOURCE_ROOT} (scripts/bootstrap does this)"
        )
    return candidates[-1]


def private_dir(path: Path) -> Path:
    """path as a directory only this user can use: created 0700 (whatever the umask), an
    existing one of this user's made 0700; SetupError if another user owns it or may write
    to it, since what it holds (jars, a runtime the jar driver runs, job configs) would then
    be theirs to change. TONY_PY_CACHE may point at a shared file system."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.stat()
    if st.st_uid != os.geteuid():
        raise SetupError(f"TonY-py's cache {path} belongs to another user (uid {st.st_uid}): "
                         "point TONY_PY_CACHE at a directory of your own")
    if st.st_mode & 0o022:
        raise SetupError(f"TonY-py's cache {path} is writable by other users (mode {stat.S_IMODE(st.st_mode):04o}): "
                         f"check what is in it, then `chmod 700 {path}`")
    if st.st_mode & 0o077:
        path.chmod(0o700)  # made under a umask of 022: readable by everyone until now
    return path


def _last_app_file() -> Path:
    """Per cluster (its HADOOP_CONF_DIR): the last job submitted from here to that one."""
    conf_dir = os.path.realpath(os.environ.get("HADOOP_CONF_DIR") or "/etc/hadoop/conf")
    return cache_dir() / f"last-app-{hashlib.sha256(conf_dir.encode()).hexdigest()[:12]}"


def remember_last_app(app_id: str) -> None:
    """For `tony advise --last`: best effort (a read-only home only loses the shortcut)."""
    try:
        _last_app_file().write_text(app_id + "\n")
    except OSError:
        pass


def last_app() -> str | None:
    try:
        return _last_app_file().read_text().strip() or None
    except OSError:
        return None
