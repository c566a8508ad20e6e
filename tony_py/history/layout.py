"""Where a job's history lives on the cluster file system (TonY's keys, TonY-py's defaults).

    <location>/intermediate/<appId>/events.jsonl.inprogress   while the AM runs (JSON Lines,
                                                              flushed as it goes)
    <location>/intermediate/<appId>/tony-final.xml
    <location>/finished/<yyyy>/<mm>/<dd>/<appId>/events.jsonl  when the AM ended
                                                job.json       the summary
                                                tony-final.xml
                                                events.parquet once a client compacted it

tony.history.location defaults to <home>/.tony/history (TonY's own default is a placeholder,
/path/to/tony-history, which is read the same way); tony.history.intermediate and
tony.history.finished override the two halves; tony.history.retention-sec (30 days) bounds how
long finished jobs stay.
"""

from __future__ import annotations

import calendar
import time
from typing import Callable

from tony_py.config.spec import FINAL_CONF_FILE

PLACEHOLDER = "/path/to/tony-history"  # TonY's tony-default.xml value: "not configured"
EVENTS_INPROGRESS = "events.jsonl.inprogress"
EVENTS = "events.jsonl"
EVENTS_PARQUET = "events.parquet"
SUMMARY = "job.json"
CONFIG = FINAL_CONF_FILE


def roots(conf_get, home: str) -> tuple[str, str]:
    """(intermediate dir, finished dir) from TonY's keys; conf_get(key) -> value or None."""
    location = (conf_get("tony.history.location") or "").strip()
    if not location or location == PLACEHOLDER:
        location = f"{home}/.tony/history"
    location = location.rstrip("/") or "/"
    intermediate = (conf_get("tony.history.intermediate") or "").strip()
    finished = (conf_get("tony.history.finished") or "").strip()
    if not intermediate or intermediate.startswith(PLACEHOLDER):
        intermediate = f"{location}/intermediate"
    if not finished or finished.startswith(PLACEHOLDER):
        finished = f"{location}/finished"
    return intermediate.rstrip("/"), finished.rstrip("/")


def intermediate_dir(intermediate_root: str, app_id: str) -> str:
    return f"{intermediate_root}/{app_id}"


def finished_dir(finished_root: str, app_id: str, finished_at: float) -> str:
    day = time.strftime("%Y/%m/%d", time.gmtime(finished_at))
    return f"{finished_root}/{day}/{app_id}"


def purge_expired(finished_root: str, list_dirs: Callable[[str], list[str]], delete: Callable[[str], bool],
                  cutoff: float) -> list[str]:
    """Delete the finished jobs of every day that ended before `cutoff` (whole yyyy/mm/dd
    directories: a purge lists directories, it reads no job's files); returns the application
    ids removed. Jobs of the cutoff's own day stay until the day after: retention is kept to the day."""
    removed = []

    def numbered(path: str) -> list[tuple[int, str]]:
        out = []
        for d in list_dirs(path):
            name = d.rstrip("/").rsplit("/", 1)[-1]
            if name.isdigit():
                out.append((int(name), d.rstrip("/")))
        return sorted(out)

    for year, year_dir in numbered(finished_root):
        for month, month_dir in numbered(year_dir):
            for day, day_dir in numbered(month_dir):
                if not (1 <= month <= 12 and 1 <= day <= 31):
                    continue  # not a date: not ours
                if calendar.timegm((year, month, day, 0, 0, 0)) + 86400 <= cutoff:
                    apps = [d.rstrip("/").rsplit("/", 1)[-1] for d in list_dirs(day_dir)]
                    if delete(day_dir):
                        removed += apps
    return removed
