"""The AM's side of job history: every event, as JSON Lines, to the cluster file system.

The coordinator records events under its lock; this writer only queues them there (a list
append) and a thread of its own writes what gathered about once a second, flushed so a reader
sees it (history/layout.py has the paths). When the job ends, the AM writes job.json and moves
the job's directory from intermediate/ to finished/. An AM that dies leaves a readable
events.jsonl.inprogress, which the next reader finalizes (history/store.py).

A write that fails (the DataNode cut off, HDFS restarting) loses nothing and stops nothing:
the events wait (up to MAX_WAITING of them), the broken file is abandoned, and the writer tries
a new part file once a second until the cluster file system takes writes again (readers merge
every events*.jsonl* file of a job, in time order, each line once). A write can also hang: after
a DataNode comes back, HDFS may hold a broken pipeline for a minute before it fails it. At the
job's end the AM does not wait for such a write: it writes the events again to a new part file
(if the stuck write lands after all, readers see each event once).
"""

from __future__ import annotations

import json
import logging
import threading
import time

from tony_py.history import layout

log = logging.getLogger("tony.am.history")

FLUSH_EVERY_S = 1.0
SLOW_WRITE_S = 5.0  # said in the AM's log: the cluster file system is struggling
FINISH_WAIT_S = 5.0  # how long the end of the job waits for a write in progress
FINISH_TRIES = 3  # new part files tried at the end of the job, a second apart
MAX_WAITING = 100_000  # events kept while the file system refuses writes (oldest dropped beyond)


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
        self.parts: list[str] = []  # the files written, in order (a new one after each failure)
        self.dropped = 0
        self.states: list[dict] = []  # every job state change, for job.json's conditions
        self._pending: list[str] = []
        self._inflight: list[str] = []  # the batch the writer's thread is writing
        self._taken_over = False  # finish() gave up waiting for a stuck write
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
            self._open()
            self.fs.writeText(f"{self.dir}/{layout.CONFIG}", final_conf_text, 0o600)
        except Exception as exc:  # noqa: BLE001 - history must never stop a job
            self.failed = True
            log.warning("job history disabled: cannot write %s: %s", self.path, exc)
            return
        finally:
            self.opened.set()
        while not self._stop.wait(FLUSH_EVERY_S):
            self.flush()

    def _open(self) -> None:
        path = self.path if not self.parts else self.path.replace(".jsonl", f"-part{len(self.parts)}.jsonl")
        self._log = self.fs.openAppendLog(path)
        self.parts.append(path)

    def flush(self) -> None:
        if self.failed:
            return
        if self._log is None:  # the last write failed: try a new part file
            try:
                self._open()
                log.info("job history: writing again (%s)", self.parts[-1])
            except Exception:  # noqa: BLE001 - still down: the events keep waiting
                return
        with self._lock:
            batch, self._pending = self._pending, []
            self._inflight = batch
            stream = self._log
        if not batch:
            return
        started = time.monotonic()
        try:
            stream.write("\n".join(batch) + "\n")
            took = time.monotonic() - started
            if took > SLOW_WRITE_S:
                log.warning("job history: a write took %.1f s (the cluster file system is slow or unreachable)", took)
        except Exception as exc:  # noqa: BLE001
            with self._lock:
                if self._taken_over:  # finish() has written this batch again elsewhere
                    return
                log.warning("job history: a write failed (%s); keeping %d event(s) and trying a new file",
                            str(exc).splitlines()[0][:300], len(batch))
                self._requeue(batch)
            self._abandon()
        finally:
            with self._lock:
                if not self._taken_over:
                    self._inflight = []

    def _requeue(self, batch: list[str]) -> None:
        """Put a batch that did not land back in front of the queue (under the lock)."""
        self._pending[:0] = batch
        excess = len(self._pending) - MAX_WAITING
        if excess > 0:
            del self._pending[:excess]
            self.dropped += excess

    def _abandon(self) -> None:
        try:
            self._log.close()
        except Exception:  # noqa: BLE001 - a broken stream may not close
            pass
        self._log = None

    def finish(self, summary: dict) -> str | None:
        """Flush, close, write job.json, move the job to finished/. Returns the finished dir."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=FINISH_WAIT_S)
        if self.failed:
            return None
        try:
            self._take_over_stuck_write()
            self._flush_at_end()
            self._log.close()
            for path in self.parts:
                self.fs.rename(path, path.removesuffix(".inprogress"))
            self.fs.writeText(f"{self.dir}/{layout.SUMMARY}", json.dumps(summary, default=str), 0o600)
            target = layout.finished_dir(self.finished_root, self.app_id, summary.get("finished_at") or time.time())
            if not self.fs.rename(self.dir, target):
                raise OSError(f"could not move {self.dir} to {target}")
        except Exception as exc:  # noqa: BLE001 - the job's outcome does not depend on it
            log.warning("could not finish the job history in %s: %s", self.dir, exc)
            return None
        self.purge()
        return target

    def _take_over_stuck_write(self) -> None:
        """The writer's thread is still in a write (a pipeline HDFS has not given up on yet):
        leave it that stream and write its batch again, to a new part file."""
        if self._thread is None or not self._thread.is_alive():
            return
        with self._lock:
            self._taken_over = True
            self._requeue(self._inflight)
            self._inflight = []
            self._log = None  # the stuck thread keeps the stream; closing it could hang as well
        log.warning("job history: a write has not returned for %.1f s; writing the last events to a new file",
                    FINISH_WAIT_S)

    def _flush_at_end(self) -> None:
        for attempt in range(FINISH_TRIES):
            self.flush()
            if self._log is not None and not self._pending:
                return
            time.sleep(1.0)
        raise OSError("the cluster file system does not take writes")

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
