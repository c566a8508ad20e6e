"""`tony history import`: a TonY job history file (.jhist: Avro events) into TonY-py's history.

TonY wrote `<appId>-<started>-<finished>-<user>-<STATUS>.jhist` with four event types
(tony-core/src/main/avro): APPLICATION_INITED, TASK_STARTED, TASK_FINISHED (with its metrics),
APPLICATION_FINISHED. They become TonY-py events, and a job.json is built from them, so a
cluster's old TonY jobs show up in `tony history` and the portal next to TonY-py's.
"""

from __future__ import annotations

import json
import re
import tempfile
from pathlib import Path

from tony_py.errors import UsageError
from tony_py.history import layout
from tony_py.history.store import HistoryStore, summary_from_events

_NAME = re.compile(r"^(application_\d+_\d+)-(\d+)-(\d+)-([^-]+)-([A-Z]+)\.jhist$")


def read_jhist(path: Path) -> tuple[dict, list[dict]]:
    """(what the file name says, the events as TonY-py events)."""
    try:
        import fastavro
    except ImportError:
        raise UsageError("reading TonY's .jhist files needs the fastavro package (pip install fastavro)") from None
    m = _NAME.match(path.name)
    if not m:
        raise UsageError(f"{path.name}: not a TonY history file name (<appId>-<start>-<end>-<user>-<STATUS>.jhist)")
    info = {"app_id": m.group(1), "started_at": int(m.group(2)) / 1000, "finished_at": int(m.group(3)) / 1000,
            "user": m.group(4), "final_status": m.group(5)}
    events = []
    with open(path, "rb") as f:
        try:
            records = list(fastavro.reader(f))
        except Exception as exc:  # noqa: BLE001 - any decoding error: not a TonY Avro file
            raise UsageError(f"{path}: not a readable Avro file: {exc}") from None
    for record in records:
        kind, body, ts = record.get("type"), record.get("event") or {}, (record.get("timestamp") or 0) / 1000
        task = f"{body['taskType']}:{body['taskIndex']}" if "taskType" in body else None
        if kind == "APPLICATION_INITED":
            events.append({"ts": ts, "kind": "AM_STARTED", "task": None, "host": body.get("host"),
                           "message": f"TonY AM on {body.get('host')} ({body.get('numTasks')} tasks)"})
        elif kind == "TASK_STARTED":
            events.append({"ts": ts, "kind": "TASK_STARTED", "task": task, "host": body.get("host"),
                           "container_id": body.get("containerID"), "message": "task started"})
        elif kind == "TASK_FINISHED":
            status = body.get("status") or ""
            events.append({"ts": ts, "kind": "TASK_FINISHED", "task": task, "message": status.lower(),
                           "exit_code": 0 if status in ("SUCCEEDED", "FINISHED") else None,
                           "failure_kind": None if status in ("SUCCEEDED", "FINISHED") else "exit_code",
                           "metrics": {m["name"]: m["value"] for m in body.get("metrics") or []},
                           "container_diagnostic": body.get("containerDiagnostic")})
        elif kind == "APPLICATION_FINISHED":
            events.append({"ts": ts, "kind": "APP_FINISHED", "task": None, "status": info["final_status"],
                           "message": f"{body.get('finishedTasks')} tasks finished, {body.get('failedTasks')} failed"})
    return info, events


def import_jhist(store: HistoryStore, jhist: str, config: str | None = None) -> str:
    path = Path(jhist)
    if not path.is_file():
        raise UsageError(f"{jhist}: no such file")
    info, events = read_jhist(path)
    report = {"name": "TonY job", "user": info["user"], "final_status": info["final_status"],
              "finish_time": info["finished_at"] * 1000}
    summary = summary_from_events(info["app_id"], events, report)
    summary.update(started_at=info["started_at"], imported_from=path.name, framework="tony")
    summary["message"] = f"imported from TonY's {path.name}"
    target = layout.finished_dir(store.finished_root, info["app_id"], info["finished_at"])
    gw = store.gw
    gw.call("create the history dir", gw.fs.mkdirs, target, 0o700)
    gw.call("write job.json", gw.fs.writeText, f"{target}/{layout.SUMMARY}", json.dumps(summary), 0o600)
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / layout.EVENTS
        local.write_text("".join(json.dumps(e) + "\n" for e in events))
        gw.call("write the events", gw.fs.upload, str(local), f"{target}/{layout.EVENTS}", 0o600)
        if config:
            gw.call("write the config", gw.fs.upload, config, f"{target}/{layout.CONFIG}", 0o600)
    return info["app_id"]
