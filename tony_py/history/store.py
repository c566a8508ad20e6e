"""Reading job history: the jobs, one job's summary, its events and config (for `tony history`,
`tony logs` and `tony portal`).

Files are read from the cluster file system through the client's JVM as local copies (cached by
path, size and modification time; bulk bytes never cross Py4J). A job whose AM died leaves only
events.jsonl.inprogress in intermediate/: once YARN says the application is over, the first
reader finalizes it (a job.json from its events and YARN's report, then the move to finished/).
Events are compacted to Parquet (events.parquet, pyarrow) by the first reader that can write
there; readers take Parquet when it is there and the JSON Lines otherwise.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

from tony_py import paths
from tony_py.config.xmlconf import parse_xml
from tony_py.errors import TonyError
from tony_py.history import layout

log = logging.getLogger("tony.history")

FINAL_YARN_STATES = ("FINISHED", "FAILED", "KILLED")
EVENT_COLUMNS = ("ts", "app_id", "kind", "task", "attempt", "state", "host", "node_id", "container_id",
                 "exit_code", "signal", "failure_kind", "status", "url", "message", "metrics", "extra")


def parse_since(text: str) -> float:
    """`7d`, `12h`, `30m` (ago) -> an epoch time."""
    units = {"d": 86400, "h": 3600, "m": 60, "s": 1}
    if not text or text[-1] not in units or not text[:-1].isdigit():
        raise ValueError(f"--since {text!r}: use e.g. 7d, 12h or 30m")
    return time.time() - int(text[:-1]) * units[text[-1]]


class HistoryStore:
    def __init__(self, gw, intermediate_root: str, finished_root: str, cache: Path | None = None):
        self.gw = gw
        self.fs = gw.fs
        self.intermediate_root = intermediate_root
        self.finished_root = finished_root
        self.cache = cache or paths.cache_dir() / "history"

    @classmethod
    def for_user(cls, gw, conf_get=lambda key: None) -> "HistoryStore":
        home = gw.call("home directory", gw.fs.homeDirectory)
        return cls(gw, *layout.roots(conf_get, home))

    # ---- files -----------------------------------------------------------------------------------
    def _local(self, remote: str) -> Path | None:
        desc = self.gw.json(f"stat {remote}", self.fs.describe, remote)
        if desc is None:
            return None
        key = remote.split("://", 1)[-1].lstrip("/").replace("/", "_")
        local = self.cache / f"{key}.{desc['size']}.{desc['mtime']}"
        if not local.exists():
            self.cache.mkdir(parents=True, exist_ok=True)
            tmp = local.with_suffix(".part")
            self.gw.call(f"read {remote}", self.fs.download, remote, str(tmp))
            tmp.replace(local)
        return local

    def _json(self, remote: str) -> dict | None:
        local = self._local(remote)
        return json.loads(local.read_text()) if local else None

    # ---- jobs ------------------------------------------------------------------------------------
    def summaries(self) -> list[dict]:
        """Every finished job's job.json, newest first (jobs finalized on the way)."""
        self.finalize_stale()
        out = []
        for path in self.gw.call("list history", self.fs.findFiles, self.finished_root, layout.SUMMARY):
            try:
                summary = self._json(path)
            except (ValueError, TonyError) as exc:
                log.warning("skipping %s: %s", path, exc)
                continue
            if summary:
                summary["_dir"] = path.rsplit("/", 1)[0]
                out.append(summary)
        return sorted(out, key=lambda s: s.get("finished_at") or 0, reverse=True)

    def running(self) -> list[str]:
        """Application ids with history in intermediate/ (running, or not finalized yet)."""
        return [d.rstrip("/").rsplit("/", 1)[-1] for d in self.gw.call("list history", self.fs.listDirs,
                                                                          self.intermediate_root)]

    def find_near(self, app_id: str, finished_at: float) -> dict | None:
        """A job that just finished, looked up by its day (no scan of the whole history)."""
        for ts in (finished_at, finished_at - 86400, finished_at + 86400):  # a day boundary in between
            directory = layout.finished_dir(self.finished_root, app_id, ts)
            summary = self._json(f"{directory}/{layout.SUMMARY}")
            if summary is not None:
                summary["_dir"] = directory
                return summary
        return None

    def find(self, app_id: str) -> dict | None:
        for summary in self.summaries():
            if summary.get("app_id") == app_id:
                return summary
        return None

    def events(self, summary: dict) -> list[dict]:
        """A finished job's events in order: from events.parquet if there, else the JSON Lines of
        each AM attempt."""
        directory = summary["_dir"]
        parquet = self._local(f"{directory}/{layout.EVENTS_PARQUET}")
        if parquet is not None:
            return read_parquet(parquet)
        return self._jsonl_events(directory)

    def _jsonl_events(self, directory: str) -> list[dict]:
        """Every event of the JSON Lines part files (one per AM attempt, more after failed
        writes) in time order, each once: an AM that gave up on a stuck write wrote its events
        again to a new part, and the stuck write may have landed after all."""
        lines: dict[str, None] = {}
        for path in self.gw.call("list events", self.fs.listFiles, directory):
            name = path.rsplit("/", 1)[-1]
            if name.startswith("events") and ".jsonl" in name:
                lines.update(dict.fromkeys(read_lines(self._local(path))))
        return sorted(parse_jsonl(lines), key=lambda e: e.get("ts") or 0)

    def config(self, summary: dict) -> dict[str, str]:
        local = self._local(f"{summary['_dir']}/{layout.CONFIG}")
        return parse_xml(local.read_bytes(), layout.CONFIG) if local else {}

    # ---- upkeep ------------------------------------------------------------------------------------
    def compact(self, summary: dict) -> bool:
        """Write events.parquet beside the JSON Lines (pyarrow; False where it is missing or the
        directory is not ours to write)."""
        try:
            import pyarrow  # noqa: F401 - the client's dependency; the jar's bundled client lacks it
        except ImportError:
            return False
        directory = summary["_dir"]
        if self.gw.call("stat", self.fs.exists, f"{directory}/{layout.EVENTS_PARQUET}"):
            return True
        events = self.events(summary)
        local = self.cache / f"{summary['app_id']}.parquet"
        self.cache.mkdir(parents=True, exist_ok=True)
        write_parquet(events, summary["app_id"], local)
        try:
            self.gw.call("write events.parquet", self.fs.upload, str(local), f"{directory}/{layout.EVENTS_PARQUET}",
                         0o600)
        except TonyError as exc:
            log.warning("could not compact %s: %s", directory, exc)
            return False
        finally:
            local.unlink(missing_ok=True)
        return True

    def finalize_stale(self) -> list[str]:
        """Jobs whose AM died before it finished their history: finalize them now, once YARN
        says they are over (their summary rebuilt from the events and YARN's report)."""
        done = []
        for app_id in self.running():
            try:
                report = self.gw.json("read the application report", self.gw.bridge.report, app_id)
            except TonyError:
                report = {"state": "UNKNOWN", "final_status": "UNKNOWN"}  # no longer known to the RM
            if report.get("state") not in FINAL_YARN_STATES + ("UNKNOWN",):
                continue
            directory = layout.intermediate_dir(self.intermediate_root, app_id)
            summary = self._json(f"{directory}/{layout.SUMMARY}")  # the AM wrote it but could not move it
            if summary is None:
                summary = summary_from_events(app_id, self._jsonl_events(directory), report)
                self.gw.call("write job.json", self.fs.writeText, f"{directory}/{layout.SUMMARY}",
                             json.dumps(summary), 0o600)
            target = layout.finished_dir(self.finished_root, app_id, summary["finished_at"])
            if self.gw.call("finalize history", self.fs.rename, directory, target):
                done.append(app_id)
        return done

    def purge(self, retention_s: int) -> list[str]:
        """Delete finished jobs older than the retention (tony.history.retention-sec), by day."""
        if retention_s <= 0:
            return []
        return layout.purge_expired(
            self.finished_root, lambda d: list(self.gw.call("list history", self.fs.listDirs, d)),
            lambda d: bool(self.gw.call("purge history", self.fs.delete, d, True)), time.time() - retention_s)


# ---- formats ---------------------------------------------------------------------------------------
def read_lines(local: Path | None) -> list[str]:
    return [] if local is None else [line for line in local.read_text(errors="replace").splitlines() if line]


def parse_jsonl(lines) -> list[dict]:
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except ValueError:
            continue  # a line cut off when the AM died
    return events


def read_jsonl(local: Path | None) -> list[dict]:
    return parse_jsonl(read_lines(local))


def write_parquet(events: list[dict], app_id: str, target: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = {name: [] for name in EVENT_COLUMNS}
    for e in events:
        known = {k: e.get(k) for k in EVENT_COLUMNS if k not in ("ts", "app_id", "metrics", "extra")}
        for k, v in known.items():
            rows[k].append(None if v is None else (int(v) if k in ("attempt", "exit_code") else str(v)))
        rows["ts"].append(int((e.get("ts") or 0) * 1000))
        rows["app_id"].append(app_id)
        metrics = e.get("metrics") or {}
        rows["metrics"].append([(k, float(v)) for k, v in metrics.items() if isinstance(v, (int, float))])
        extra = {k: v for k, v in e.items() if k not in EVENT_COLUMNS}
        rows["extra"].append(json.dumps(extra) if extra else None)
    schema = pa.schema([("ts", pa.timestamp("ms", tz="UTC")), ("app_id", pa.string()), ("kind", pa.string()),
                        ("task", pa.string()), ("attempt", pa.int64()), ("state", pa.string()), ("host", pa.string()),
                        ("node_id", pa.string()), ("container_id", pa.string()), ("exit_code", pa.int64()),
                        ("signal", pa.string()), ("failure_kind", pa.string()), ("status", pa.string()),
                        ("url", pa.string()), ("message", pa.string()), ("metrics", pa.map_(pa.string(), pa.float64())),
                        ("extra", pa.string())])
    pq.write_table(pa.table(rows, schema=schema), target, compression="zstd")


def read_parquet(local: Path) -> list[dict]:
    import pyarrow.parquet as pq

    events = []
    for row in pq.read_table(local).to_pylist():
        event = {k: v for k, v in row.items() if v is not None and k not in ("extra", "metrics", "app_id")}
        event["ts"] = row["ts"].timestamp()
        if row.get("metrics"):
            event["metrics"] = dict(row["metrics"])
        if row.get("extra"):
            event.update(json.loads(row["extra"]))
        events.append(event)
    return events


def summary_from_events(app_id: str, events: list[dict], report: dict) -> dict:
    """job.json for a job whose AM could not write it: what its events and YARN's report say."""
    verdict = next((e for e in reversed(events) if e.get("kind") == "VERDICT"), None)
    tasks: dict[str, dict] = {}
    for e in events:
        if e.get("task"):
            row = tasks.setdefault(e["task"], {"name": e["task"], "type": e["task"].split(":")[0],
                                               "index": int(e["task"].split(":")[-1]), "state": "?"})
            if e.get("kind") == "TASK_FINISHED":
                row.update(state="SUCCEEDED" if e.get("exit_code") == 0 and not e.get("failure_kind") else
                           "PREEMPTED" if e.get("failure_kind") == "preempted" else "FAILED",
                           exit_code=e.get("exit_code"), signal=e.get("signal"), metrics=e.get("metrics") or {},
                           finished_at=e.get("ts"))
            elif e.get("kind") == "TASK_STARTED":
                row.update(state="RUNNING", started_at=e.get("ts"))
            if e.get("container_id"):
                row["container_id"] = e["container_id"]
            if e.get("host"):
                row["host"] = e["host"]
    submitted = next((e["ts"] for e in events if e.get("kind") == "SUBMITTED"), None)
    return {
        "version": 1, "app_id": app_id, "name": report.get("name"), "user": report.get("user"),
        "queue": report.get("queue"), "tags": [], "framework": None, "submitted_at": submitted,
        "started_at": events[0]["ts"] if events else None,
        "finished_at": (report.get("finish_time") or 0) / 1000 or (events[-1]["ts"] if events else time.time()),
        "final_status": report.get("final_status") if report.get("final_status") not in (None, "UNDEFINED")
        else "FAILED",
        "message": (verdict or {}).get("message") or "the AM ended before it recorded the job's end; "
                                                      "finalized from its events and YARN's report",
        "root_cause": None, "diagnostics": report.get("diagnostics") or "", "restarts_used": sum(
            1 for e in events if e.get("kind") == "RESTART_DECIDED"),
        "am_attempts": report.get("attempt"), "tracking_url": report.get("tracking_url"), "tensorboard_url": None,
        "am_log_url": None, "counts": {}, "conditions": [
            {"type": e["state"], "time": e["ts"], "message": e.get("message", "")}
            for e in events if e.get("kind") == "STATE" and e.get("state")],
        "tasks": sorted(tasks.values(), key=lambda t: (t["type"], t["index"])), "finalized_by_reader": True,
    }
