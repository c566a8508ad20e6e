"""Everything the job ships, staged on the cluster file system.

Per job, in <home>/.tony/<appId>/ (mode 0700, deleted when the job ends): the zipped src_dir,
local files named in tony.containers.resources, the secret and the resolved config
(tony-final.xml) for the owner's other processes (staged once the AM is submitted), and, only
where task containers localize them (a Kerberos cluster) or they are too large for the AM's
credentials, the spec and the AM's job description (tony-job.json): submission.py.

Shared by every job, in <home>/.tony/cache/, named by content hash: the venv zip, the TonY-py
runtime (tony_py, plus py4j, defusedxml and psutil under deps/, for the AM and executors) and
the jar. A file
whose hash is already there is not uploaded again, and because its path and timestamp do not
change, NodeManagers reuse their localized copy (PRIVATE: cached per user; PUBLIC, shared by
every user of a node, only with tony.staging.cache-visibility=PUBLIC). TonY re-uploaded the
venv on every submit.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import json
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tony_py import paths
from tony_py.errors import UsageError

CACHE_DIR = ".tony/cache"
STAGING_ROOT = ".tony"
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
# Pure-Python (or abi3) packages the AM and executors import, shipped with every job.
RUNTIME_PACKAGES = ("tony_py", "py4j", "defusedxml", "psutil")
_SKIP_DIRS = {"__pycache__", "tests", "_bundled"}  # _bundled: an installed wheel's jar, not the job's


@dataclass
class Resource:
    """A file YARN localizes into a container; `path` is fully qualified."""

    path: str
    size: int
    mtime: int
    type: str = "FILE"  # FILE | ARCHIVE
    visibility: str = "APPLICATION"  # PUBLIC | PRIVATE | APPLICATION

    def to_json(self) -> dict:
        return dict(self.__dict__)


# ---- building local artefacts ------------------------------------------------------------------
def _deterministic_zip(entries: list[tuple[str, Path]], out: io.BufferedIOBase) -> None:
    """Zip with fixed timestamps and sorted names, so equal content gives equal bytes. Interrupted
    (a Ctrl-C mid-entry), the half-written archive is abandoned and the interruption goes up as it
    came: ZipFile's own close would raise a ValueError over it (an entry still open)."""
    zf = zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6)
    try:
        for arcname, path in sorted(entries):
            info = zipfile.ZipInfo(arcname, date_time=_ZIP_EPOCH)
            mode = path.stat().st_mode & 0o777
            info.external_attr = (0o100000 | (mode or 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    except BaseException:
        with contextlib.suppress(Exception):
            zf.close()
        zf.fp = None  # abandoned: its own finaliser must not try closing it again
        raise
    zf.close()


OPTIONAL_PACKAGES = {"psutil"}  # executors report fewer metrics without it


def package_root(package: str) -> Path | None:
    """Where an installed package lives: None for a missing optional one, UsageError for a
    missing required one (the cluster's runtime archive and local mode's runtime dir alike)."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        if package in OPTIONAL_PACKAGES:
            return None
        raise UsageError(f"the Python package {package!r} is missing from this environment")
    return Path(list(spec.submodule_search_locations)[0])


def _package_files(package: str, root: Path) -> list[tuple[str, Path]]:
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS]
        for name in filenames:
            if name.endswith((".pyc", ".pyo")):
                continue
            p = Path(dirpath) / name
            files.append((f"{package}/{p.relative_to(root).as_posix()}", p))
    return files


def package_entries(packages: tuple[str, ...]) -> list[tuple[str, Path]]:
    """tony_py at the top (user code may import tony_py.task from it), third-party packages
    under deps/ (only TonY-py's own processes put deps/ on their path, so ours never shadow the
    user's own py4j or psutil)."""
    entries: list[tuple[str, Path]] = []
    for package in packages:
        root = package_root(package)
        if root is None:
            continue
        prefix = "" if package == "tony_py" else "deps/"
        entries.extend((prefix + arcname, path) for arcname, path in _package_files(package, root))
    return entries


def write_zip(entries: list[tuple[str, Path]], target: Path) -> Path:
    with open(target, "wb") as out:
        _deterministic_zip(entries, out)
    return target


RUNTIME_CACHE_KEEP = 4  # the newest runtime zips kept in the local cache


def runtime_zip(fallback: Path) -> Path:
    """The runtime zip, built once for each state of the packages' files (their names, sizes and
    mtimes) and kept in the user's cache: zipping ~180 files cost every submit ~35 ms before its
    first upload. Built at `fallback` when the cache cannot be written."""
    entries = package_entries(RUNTIME_PACKAGES)
    state = hashlib.sha256()
    for arcname, path in sorted(entries):
        st = path.stat()
        state.update(f"{arcname}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    cache = paths.cache_dir() / "runtime"
    cached = cache / f"tony-runtime-{state.hexdigest()[:20]}.zip"
    if cached.is_file():
        return cached
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cache / f".{cached.name}.{os.getpid()}.tmp"
        write_zip(entries, tmp)
        tmp.replace(cached)  # atomic: a concurrent submit finds the whole file or none
    except OSError:
        return write_zip(entries, fallback)
    with contextlib.suppress(OSError):  # another submit may be pruning too
        for old in sorted(cache.glob("tony-runtime-*.zip"), key=lambda p: p.stat().st_mtime)[:-RUNTIME_CACHE_KEEP]:
            old.unlink()
    return cached


def zip_src_dir(src_dir: Path, target: Path) -> Path:
    entries = []
    for dirpath, dirnames, filenames in os.walk(src_dir):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            p = Path(dirpath) / name
            if p.is_file():
                entries.append((p.relative_to(src_dir).as_posix(), p))
    with open(target, "wb") as out:
        _deterministic_zip(entries, out)
    return target


def sha256_file(path: Path, remember: bool = True) -> str:
    """Content hash, remembered by (path, size, mtime) so an unchanged multi-GB venv zip is
    hashed once, not on every submit. Files built fresh for each submit (the runtime zip) pass
    remember=False: their temp paths would only pile up in the memo."""
    if not remember:
        return _sha256(path)
    st = path.stat()
    key = f"{path.resolve()}:{st.st_size}:{st.st_mtime_ns}"
    memo_path = paths.cache_dir() / "hashes.json"
    try:
        memo = json.loads(memo_path.read_text())
    except (OSError, ValueError):
        memo = {}
    if key in memo:
        return memo[key]
    digest = _sha256(path)
    memo = {k: v for k, v in memo.items() if not k.startswith(f"{path.resolve()}:")}
    memo[key] = digest
    tmp = memo_path.with_suffix(".tmp")
    tmp.write_text(json.dumps(memo))
    tmp.replace(memo_path)
    return digest


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_local_inputs(src_dir: str | None, python_venv: str | None) -> None:
    """The input checks that need no cluster: run before anything is started or uploaded."""
    if src_dir and not _is_remote(src_dir):
        p = Path(src_dir)
        if not p.exists():
            raise UsageError(f"--src_dir {src_dir}: no such directory")
        if not (p.is_dir() or zipfile.is_zipfile(p)):
            raise UsageError(f"--src_dir {src_dir}: not a directory or a zip file")
    if python_venv and not _is_remote(python_venv):
        p = Path(python_venv)
        if not p.is_file():
            raise UsageError(f"--python_venv {python_venv}: no such file")
        if not zipfile.is_zipfile(p):
            raise UsageError(f"--python_venv {python_venv}: not a zip file (zip the virtualenv's directory)")


def _is_remote(path: str) -> bool:
    return "://" in path


# ---- uploading -----------------------------------------------------------------------------------
class Stager:
    """Uploads through the client JVM's Hadoop FileSystem (gateway.fs).

    The cache is private to the user by default (directory 0700, files 0600, localized with
    PRIVATE visibility: each NodeManager keeps one copy per user). With
    tony.staging.cache-visibility=PUBLIC the files are world-readable and localized PUBLIC (one
    copy per NodeManager for everyone) — only for venvs that hold nothing secret."""

    def __init__(self, gateway, app_id: str, cache_visibility: str = "PRIVATE", warn=None):
        self.gw = gateway
        self.fs = gateway.fs
        self.home = gateway.call("home directory", self.fs.homeDirectory)
        self.app_id = app_id
        self.staging_dir = f"{self.home}/{STAGING_ROOT}/{app_id}"
        self.cache_dir = f"{self.home}/{CACHE_DIR}"
        self.public = cache_visibility == "PUBLIC"
        self.warn = warn or (lambda text: None)
        self.reused: list[str] = []

    def create_dirs(self) -> None:
        self.gw.call("create the staging dir", self.fs.mkdirs, self.staging_dir, 0o700)
        self.gw.call("create the cache dir", self.fs.mkdirs, self.cache_dir, 0o755 if self.public else 0o700)

    def _describe(self, path: str) -> dict | None:
        return self.gw.json(f"stat {path}", self.fs.describe, path)

    def upload_private(self, local: Path, name: str, type_: str = "FILE") -> Resource:
        """A per-job file in the staging dir."""
        desc = self.gw.json(f"upload {local}", self.fs.upload, str(local), f"{self.staging_dir}/{name}", 0o600)
        return Resource(desc["path"], desc["size"], desc["mtime"], type_, "APPLICATION")

    def upload_cached(self, local: Path, name: str, type_: str) -> Resource:
        """A content-addressed file in the shared cache; uploaded only if it is not there yet."""
        remote = f"{self.cache_dir}/{name}"
        mode = 0o644 if self.public else 0o600
        desc = self._describe(remote)
        if desc is None:
            desc = self.gw.json(f"upload {local}", self.fs.upload, str(local), remote, mode)
        else:
            self.reused.append(name)
            if desc.get("mode") != mode:  # cached by an earlier version, or under the other setting
                self.gw.call(f"chmod {name}", self.fs.setPermission, remote, mode)
                desc = self._describe(remote)
        visibility = "PRIVATE"
        if self.public:
            if desc["public"]:
                visibility = "PUBLIC"
            else:
                self.warn(f"tony.staging.cache-visibility=PUBLIC: {remote} is not readable by everyone "
                          "(a parent directory is not world-traversable); localized PRIVATE instead")
        return Resource(desc["path"], desc["size"], desc["mtime"], type_, visibility)

    def remote(self, path: str, type_: str) -> Resource:
        desc = self._describe(path)
        if desc is None:
            raise UsageError(f"{path}: no such file on the cluster file system")
        return Resource(desc["path"], desc["size"], desc["mtime"], type_, "PUBLIC" if desc["public"] else "PRIVATE")

    def write_text(self, name: str, text: str, mode: int = 0o600, localized: bool = True) -> Resource | None:
        """A per-job file, created with its mode (the app secret is one); its Resource, for YARN
        to localize, unless it is not to be (no stat then)."""
        path = f"{self.staging_dir}/{name}"
        self.gw.call(f"write {name}", self.fs.writeText, path, text, mode)
        if not localized:
            return None
        desc = self._describe(path)
        return Resource(desc["path"], desc["size"], desc["mtime"], "FILE", "APPLICATION")

    def cleanup(self) -> None:
        try:
            self.gw.call("delete the staging dir", self.fs.delete, self.staging_dir, True)
        except Exception:  # noqa: BLE001 - best effort; the AM deletes it too
            pass
