"""`tony history`: the jobs that ran, and everything recorded about one of them.

    tony history [list] [--user U] [--status S] [--since 7d] [--tag T] [--limit N] [--json]
    tony history show APP_ID [--events] [--tasks] [--config] [--json]
    tony history import FILE.jhist [--config tony-final.xml]
    tony history purge

Reads the history on the cluster file system (tony.history.* from $TONY_CONF_DIR/tony-site.xml
or --conf, as `tony submit` reads them); a job's events are in Parquet (events.parquet) for
pandas or Spark: `pyarrow.parquet.read_table(path)`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from rich.console import Console
from rich.table import Table

from tony_py.bridge.gateway import ClientGateway
from tony_py.client.flags import Parser
from tony_py.config.layers import load_conf
from tony_py.errors import TonyError, UsageError
from tony_py.history.store import HistoryStore, parse_since


def _store(gw, overrides: list[str]) -> HistoryStore:
    conf = load_conf(None, overrides)
    return HistoryStore.for_user(gw, conf.get)


def matches(summary: dict, user: str | None, status: str | None, since: float | None, tag: str | None) -> bool:
    return ((user is None or summary.get("user") == user)
            and (status is None or (summary.get("final_status") or "").upper() == status.upper())
            and (since is None or (summary.get("finished_at") or 0) >= since)
            and (tag is None or tag.lower() in [t.lower() for t in summary.get("tags") or []]))


def _when(ts) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else ""


def list_jobs(store: HistoryStore, opts, out) -> int:
    since = parse_since(opts.since) if opts.since else None
    jobs = [s for s in store.summaries() if matches(s, opts.user, opts.status, since, opts.tag)][: opts.limit]
    for summary in jobs:
        store.compact(summary)  # first reader turns the JSON Lines into Parquet
    if opts.json:
        print(json.dumps([{k: v for k, v in s.items() if k != "_dir"} for s in jobs], default=str, indent=1), file=out)
        return 0
    table = Table(show_edge=False)
    for col in ("application", "name", "user", "status", "finished", "duration", "tasks", "restarts"):
        table.add_column(col)
    for s in jobs:
        took = (s.get("finished_at") or 0) - (s.get("started_at") or s.get("finished_at") or 0)
        table.add_row(s["app_id"], s.get("name") or "", s.get("user") or "", s.get("final_status") or "",
                      _when(s.get("finished_at")), f"{int(took) // 60}m{int(took) % 60:02d}s", str(len(s.get("tasks") or [])),
                      str(s.get("restarts_used") or 0))
    Console(file=out, width=160).print(table)
    if not jobs:
        print("no jobs in the history match", file=out)
    return 0


def show_job(store: HistoryStore, opts, out) -> int:
    summary = store.find(opts.app_id)
    if summary is None:
        raise UsageError(f"{opts.app_id}: not in the job history ({store.finished_root})")
    store.compact(summary)
    detail = {k: v for k, v in summary.items() if k != "_dir"}
    if opts.events:
        detail["events"] = store.events(summary)
    if opts.config:
        detail["config"] = store.config(summary)
    if opts.json:
        print(json.dumps(detail, default=str, indent=1), file=out)
        return 0
    console = Console(file=out, width=160)
    console.print(f"{summary['app_id']}  {summary.get('name') or ''}  {summary.get('final_status')}")
    console.print(f"  {summary.get('message') or ''}")
    for key in ("user", "queue", "framework", "restarts_used", "tracking_url", "tensorboard_url", "am_log_url"):
        if summary.get(key) not in (None, ""):
            console.print(f"  {key}: {summary[key]}")
    console.print(f"  submitted {_when(summary.get('submitted_at'))}, finished {_when(summary.get('finished_at'))}")
    if summary.get("root_cause"):
        rc = summary["root_cause"]
        console.print(f"  root cause: {rc.get('task')} (attempt {rc.get('attempt')}): {rc.get('message')}")
    if opts.tasks or not (opts.events or opts.config):
        table = Table(show_edge=False)
        for col in ("task", "state", "host", "exit", "max memory", "avg CPU", "max GPU", "container"):
            table.add_column(col)
        for t in summary.get("tasks") or []:
            m = t.get("metrics") or {}
            table.add_row(t["name"], t.get("state") or "", t.get("host") or "",
                          t.get("signal") or ("" if t.get("exit_code") is None else str(t["exit_code"])),
                          f"{m['MAX_MEMORY_BYTES'] / 2**20:.0f} MB" if m.get("MAX_MEMORY_BYTES") else "",
                          f"{m['AVG_CPU_UTILIZATION']:.0f}%" if m.get("AVG_CPU_UTILIZATION") is not None else "",
                          f"{m['MAX_GPU_UTILIZATION']:.0f}%" if m.get("MAX_GPU_UTILIZATION") is not None else "",
                          t.get("container_id") or "")
        console.print(table)
    if opts.events:
        for e in detail["events"]:
            console.print(f"  {_when(e.get('ts'))} {e.get('kind'):<15} {e.get('task') or '':<14} {e.get('message') or ''}")
    if opts.config:
        for key, value in sorted(detail["config"].items()):
            console.print(f"  {key} = {value}")
    return 0


def _filters(parser: argparse.ArgumentParser, default) -> None:
    parser.add_argument("--user", default=default)
    parser.add_argument("--status", type=str.upper, choices=("SUCCEEDED", "FAILED", "KILLED"), default=default,
                        help="SUCCEEDED, FAILED or KILLED")
    parser.add_argument("--since", default=default, help="e.g. 7d, 12h, 30m")
    parser.add_argument("--tag", default=default)
    parser.add_argument("--limit", type=int, default=50 if default is None else default)
    parser.add_argument("--json", action="store_true", default=False if default is None else default)


def build_parser(prog: str = "tony history") -> Parser:
    parser = Parser(prog=prog, description="Jobs that ran, from the job history (tony.history.location).")
    parser.add_argument("--conf", action="append", default=[], metavar="K=V", help="tony.history.* override")
    sub = parser.add_subparsers(dest="command")
    show = sub.add_parser("show", help="one job: summary, tasks, events, config")
    show.add_argument("app_id")
    for flag in ("--events", "--tasks", "--config", "--json"):
        show.add_argument(flag, action="store_true")
    imp = sub.add_parser("import", help="add a TonY .jhist file (its Avro events) to the history")
    imp.add_argument("jhist")
    imp.add_argument("--config", help="the job's tony-final.xml")
    sub.add_parser("purge", help="delete jobs older than tony.history.retention-sec")
    _filters(parser, None)
    # `tony history list …` is `tony history …` (the subparser must not reset what was given before it)
    _filters(sub.add_parser("list", help="the jobs (the default)"), argparse.SUPPRESS)
    return parser


def main(argv: list[str], prog: str = "tony history") -> int:
    parser = build_parser(prog)
    try:
        opts = parser.parse_args(argv)
        if opts.since:
            try:
                parse_since(opts.since)
            except ValueError as exc:
                raise UsageError(str(exc)) from None
        with ClientGateway() as gw:
            store = _store(gw, opts.conf)
            if opts.command == "show":
                return show_job(store, opts, sys.stdout)
            if opts.command == "import":
                from tony_py.history.jhist import import_jhist

                print(f"imported {import_jhist(store, opts.jhist, opts.config)}")
                return 0
            if opts.command == "purge":
                retention = int(load_conf(None, opts.conf).get("tony.history.retention-sec") or 0)
                removed = store.purge(retention)
                print(f"purged {len(removed)} job(s) older than {retention} s")
                return 0
            return list_jobs(store, opts, sys.stdout)
    except TonyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
