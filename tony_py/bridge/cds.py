"""Class-data sharing for the client JVM: Hadoop's classes loaded from a memory-mapped archive
instead of parsed and verified from ~200 jars on every submit.

Measured on the 2-core machine: a submit reached YARN 0.35-0.45 s sooner (the JVM's start, the
YarnClient's and the first FileSystem's class loading; docs/performance.md). JDK 17's dynamic
archive: the first JVM of a classpath runs with -XX:ArchiveClassesAtExit and writes the archive
as it exits; later ones map it with -XX:SharedArchiveFile. The JVM checks the archive against
its classpath (each jar's size and mtime) and quietly runs without it on any mismatch, so a
stale archive costs speed, never correctness; its name carries a hash of the java binary and
the classpath's jars, so a changed install makes a new one instead.

Two rules of the JDK shape the classpath: no non-empty directory may come before the last jar
(the configuration directory goes last: jars hold no *-site.xml, so lookups find the same
files), and the archive lives in this user's cache directory only (a JVM maps it as code).
TONY_CLIENT_CDS=off turns it off; a -Xshare or -XX:SharedArchiveFile of the user's own in
HADOOP_CLIENT_OPTS wins.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import shutil
import subprocess
import time
from pathlib import Path

from tony_py import paths

ENV = "TONY_CLIENT_CDS"
LOCK_STALE_S = 24 * 3600.0  # after this a lock's pid may be another process's
PRUNE_AFTER_S = 30 * 24 * 3600.0  # an archive not rewritten for this long goes


def classpath_order(entries: list[str]) -> list[str]:
    """Jars and jar globs first, directories after them, each group in its own order."""
    jars = [e for e in entries if e.endswith((".jar", "*"))]
    return jars + [e for e in entries if not e.endswith((".jar", "*"))]


def _fingerprint(java: str, classpath: list[str]) -> str:
    """The java binary and the jars (each one's path, size and mtime). Not the directories: the
    JDK lets those after the last jar differ, so each HADOOP_CONF_DIR (every test cluster has one)
    shares one archive instead of writing its own."""
    binary = os.path.realpath(shutil.which(java) or java)
    h = hashlib.sha256(binary.encode())
    with contextlib.suppress(OSError):
        h.update(str(os.stat(binary).st_mtime_ns).encode())
    for entry in classpath_order(classpath):
        if not entry.endswith((".jar", "*")):
            break  # the directories, all after the jars
        h.update(b"\0" + entry.encode())
        for jar in sorted(glob.glob(entry)) if entry.endswith("*") else [entry]:
            try:
                st = os.stat(jar)
            except OSError:
                continue
            h.update(f"\0{jar}:{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24]


class Archive:
    """One JVM's use of the archive: options() before it starts, finish() after it ended."""

    def __init__(self, java: str, classpath: list[str], user_opts: list[str], env: dict | None = None):
        env = os.environ if env is None else env
        self.enabled = env.get(ENV, "on").lower() not in ("off", "0", "false", "no") and not any(
            o.startswith(("-Xshare", "-XX:SharedArchiveFile", "-XX:ArchiveClassesAtExit")) for o in user_opts)
        self.path = paths.cache_dir() / "cds" / f"client-{_fingerprint(java, classpath)}.jsa" if self.enabled else None
        self.dumping: Path | None = None  # the file this JVM writes as it exits

    def options(self) -> list[str]:
        if self.path is None:
            return []
        if self.path.is_file():
            return [f"-XX:SharedArchiveFile={self.path}"]
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        lock = self.path.with_suffix(".lock")
        self._clear_dead_lock(lock)
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:  # another client writes it now
            return []
        with os.fdopen(fd, "w") as f:
            f.write(str(os.getpid()))
        for old in self.path.parent.glob("client-*.jsa"):  # archives of installs long gone
            with contextlib.suppress(OSError):
                if time.time() - old.stat().st_mtime > PRUNE_AFTER_S:
                    old.unlink()
        self.dumping = self.path.with_name(f"{self.path.stem}.{os.getpid()}.tmp")
        return [f"-XX:ArchiveClassesAtExit={self.dumping}"]

    def _clear_dead_lock(self, lock: Path) -> None:
        """A lock whose writer is gone (or a day old: its pid may be another's by now) goes,
        with that writer's half-written file. A writer holds its lock for its JVM's whole life:
        the archive is written as the JVM exits."""
        with contextlib.suppress(OSError, ValueError):
            holder = int(lock.read_text().strip() or 0)
            alive = time.time() - lock.stat().st_mtime < LOCK_STALE_S  # (0: its writer is writing its pid)
            if alive and holder > 0:
                try:
                    os.kill(holder, 0)
                except ProcessLookupError:
                    alive = False
                except PermissionError:
                    pass
            if not alive:
                lock.unlink(missing_ok=True)
                self.path.with_name(f"{self.path.stem}.{holder}.tmp").unlink(missing_ok=True)

    def finish(self, proc: subprocess.Popen | None, exited_cleanly: bool) -> None:
        """After the JVM ended: keep what a cleanly ended dumping JVM wrote, drop anything else."""
        if self.dumping is None:
            return
        try:
            if exited_cleanly and proc is not None and proc.returncode is not None and self.dumping.is_file() \
                    and self.dumping.stat().st_size > 0:
                self.dumping.replace(self.path)
        finally:
            self.dumping.unlink(missing_ok=True)
            lock = self.path.with_suffix(".lock")
            with contextlib.suppress(OSError, ValueError):
                if int(lock.read_text().strip() or 0) == os.getpid():  # ours, not a successor's
                    lock.unlink()
            self.dumping = None
