"""The AM's side of job history: every event, as JSON Lines, to the cluster file system.

The coordinator records events under its lock; this writer only queues them there (a list
append) and a thread of its own writes what gathered about once a second, flushed so a reader
sees it (history/layout.py has the paths). When the job ends, the AM writes job.json and moves
the job's directory from intermediate/ to finished/. An AM that dies leaves a readable
events.jsonl.inprogress, which the next reader finalizes (history/store.py).
"""

from __future__ import annotations

import json
import logging
import threading
import time

from tony_py.history import layout

log = logging.getLogger("tony.am.history")

FLUSH_EVERY_S = 1.0


class HistoryWriter:
    def __init__(self, fs, intermediate_root: str, finished_root: str, app_id: str, am_attempt: int,
                 retention_s: int = 0):
        self.fs = fs
        self.retention_s = retention_s
        self.app_id = app_id
        self.dir = layout.intermediate_dir(intermediate_root, app_id)
        self.finished_root = finished_root
        # each AM attempt its own file (an earlier attempt's file may still be leased)
        self.path = f"{self.dir}/{layout.EVENTS_INPROGRESS}" if am_attempt == 1 else \
            f"{self.dir}/events-attempt{am_attempt}.jsonl.inprogress"
        self.states: list[dict] = []  # every job state change, for job.json's conditions
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._log = None
        self._thread: threading.Thread | None = None
        self.failed = False
        self.opened = threading.Event()  # set once the files are open, or failed to open

    # ---- EventLog listener: runs under the coordinator's lock, so only a list append ----------
    def __call__(self, event: dict) -> None:
        line = json.dumps(event, separators=(",", ":"), default=str)
        with self._lock:
            self._pending.append(line)
        if event.get("kind") == "STATE":
            self.states.append(event)

    def start(self, final_conf_text: str) -> None:
        """Opens the history files in the writer's thread: the AM's first HDFS writes (the whole
        HDFS client loads) must not stand between it and registering with the RM. Events
        recorded meanwhile wait in the queue."""
        self._thread = threading.Thread(target=self._loop, args=(final_conf_text,), name="am-history", daemon=True)
        self._thread.start()

    def _loop(self, final_conf_text: str) -> None:
        try:
            self._log = self.fs.openAppendLog(self.path)
            self.fs.writeText(f"{self.dir}/{layout.CONFIG}", final_conf_text, 0o600)
        except Exception as exc:  # noqa: BLE001 - history must never stop a job
            self.failed = True
            log.warning("job history disabled: cannot write %s: %s", self.path, exc)
            return
        finally:
            self.opened.set()
        while not self._stop.wait(FLUSH_EVERY_S):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch and self._log is not None and not self.failed:
            try:
                self._log.write("\n".join(batch) + "\n")
            except Exception as exc:  # noqa: BLE001
                self.failed = True
                log.warning("job history stopped: %s", exc)

    def finish(self, summary: dict) -> str | None:
        """Flush, close, write job.json, move the job to finished/. Returns the finished dir."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._log is None or self.failed:
            return None
        try:
            self.flush()
            self._log.close()
            self.fs.rename(self.path, self.path.removesuffix(".inprogress"))
            self.fs.writeText(f"{self.dir}/{layout.SUMMARY}", json.dumps(summary, default=str), 0o600)
            target = layout.finished_dir(self.finished_root, self.app_id, summary.get("finished_at") or time.time())
            if not self.fs.rename(self.dir, target):
                raise OSError(f"could not move {self.dir} to {target}")
        except Exception as exc:  # noqa: BLE001 - the job's outcome does not depend on it
            log.warning("could not finish the job history in %s: %s", self.dir, exc)
            return None
        self.purge()
        return target

    def purge(self) -> None:
        """Jobs past tony.history.retention-sec go, whole days at a time (a few directory listings)."""
        if self.retention_s <= 0:
            return
        try:
            removed = layout.purge_expired(self.finished_root, lambda d: list(self.fs.listDirs(d)),
                                           lambda d: bool(self.fs.delete(d, True)), time.time() - self.retention_s)
            if removed:
                log.info("job history: purged %d job(s) older than %d s", len(removed), self.retention_s)
        except Exception as exc:  # noqa: BLE001
            log.warning("job history: could not purge old jobs: %s", exc)
