"""`tony advise`: how a job could run better, from its own measurements (tony_py/advice).

    tony advise APP_ID | --last | DIR  [--json] [--write FILE] [--conf K=V ...]

APP_ID: a running job (its AM's findings, worked out as it runs) or one in the job history
(worked out from its history); --last: the last job `tony submit` ran from this account here,
else the newest in the history; DIR: a local copy of a job's history directory (job.json,
events*.jsonl, tony-final.xml), read without a cluster. --write FILE writes the job's own
configuration with every suggested value applied: the next run's `--conf_file FILE`.
Exit 0 with findings or without, 2 for bad input (an unknown job, a bad flag).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tony_py.advice import facts as advice_facts
from tony_py.advice import report
from tony_py.advice.model import Finding
from tony_py.bridge.gateway import ClientGateway
from tony_py.client.flags import Parser
from tony_py.client.job import Job
from tony_py.client.staging import STAGING_ROOT
from tony_py.config.layers import DEFAULTS_PATH, load_conf
from tony_py.config.xmlconf import parse_xml, read_xml, to_xml
from tony_py.config.yarnsite import allocation_limits, queue_room
from tony_py.errors import TonyError, UsageError
from tony_py.history import layout
from tony_py.history.store import HistoryStore, parse_jsonl
from tony_py.paths import last_app

def build_parser(prog: str) -> Parser:
    p = Parser(prog=prog, description="How a job could run better: findings from its own measurements, "
                                      "each with the change to make.")
    p.add_argument("job", nargs="?", help="an application id, or a local copy of a job's history directory")
    p.add_argument("--last", action="store_true", help="the last job submitted from here (else the newest in the history)")
    p.add_argument("--json", action="store_true", help="the findings as JSON")
    p.add_argument("--write", metavar="FILE", help="write the job's configuration with the suggestions applied")
    p.add_argument("--conf", action="append", default=[], metavar="K=V", help="tony.history.* as for tony history")
    return p


def main(argv: list[str], prog: str = "tony advise", out=sys.stdout) -> int:
    try:
        opts = build_parser(prog).parse_args(argv)
        if bool(opts.job) == bool(opts.last):
            raise UsageError("give one job: an application id, a history directory, or --last")
        if opts.job and Path(opts.job).exists():
            app_id, findings, props = from_directory(Path(opts.job))
        elif opts.job and not opts.job.startswith("application_"):
            raise UsageError(f"{opts.job!r} is neither an application id nor a directory")
        else:
            with ClientGateway() as gw:
                app_id, findings, props = from_cluster(gw, opts)
        if opts.write:
            write(opts.write, props, findings)
        print(json.dumps(report.to_json(app_id, findings), indent=1) if opts.json else report.text(app_id, findings),
              file=out)
        if opts.write and not opts.json:
            print(f"wrote {opts.write}: the next run with --conf_file {opts.write}", file=out)
        return 0
    except TonyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code


def from_directory(directory: Path) -> tuple[str, list[Finding], dict[str, str]]:
    directory = directory if directory.is_dir() else directory.parent
    summary_file = directory / layout.SUMMARY
    if not summary_file.is_file():
        raise UsageError(f"{directory}: no {layout.SUMMARY} (a job's history directory has one)")
    try:
        summary = json.loads(summary_file.read_text())
        summary["app_id"]
    except (ValueError, TypeError, KeyError):
        raise UsageError(f"{summary_file}: not a job's summary (JSON with its app_id)") from None
    lines = [line for p in sorted(directory.glob("events*.jsonl*")) for line in p.read_text().splitlines()]
    events = sorted(parse_jsonl(dict.fromkeys(lines)), key=lambda e: e.get("ts") or 0)
    props = read_xml(directory / layout.CONFIG) if (directory / layout.CONFIG).is_file() else {}
    smallest, largest = allocation_limits()
    facts = advice_facts.from_history(summary, events, props, smallest, max_allocation=largest)
    return summary["app_id"], report.advise(facts), props


def from_cluster(gw, opts) -> tuple[str, list[Finding], dict[str, str]]:
    store = HistoryStore.for_user(gw, load_conf(None, opts.conf).get)
    app_id = opts.job or last_app() or _newest(store, gw)
    if not app_id.startswith("application_"):
        raise UsageError(f"{app_id!r} is neither an application id nor a directory")
    running = _running(gw, app_id)
    if running is not None:
        return running
    summary = store.find(app_id)
    if summary is None:
        raise UsageError(f"{app_id}: neither running (or its AM has not answered yet) nor in the job history "
                         f"({store.finished_root})")
    props = store.config(summary)
    smallest, largest = allocation_limits()
    facts = advice_facts.from_history(summary, store.events(summary), props, smallest, queue_room(), largest)
    return app_id, report.advise(facts), props


def _newest(store: HistoryStore, gw) -> str:
    mine = [s for s in store.summaries() if s.get("user") in (None, gw.user)]
    if not mine:
        raise UsageError("--last: no job submitted from here, and none of yours in the job history")
    return mine[0]["app_id"]


def _running(gw, app_id: str) -> tuple[str, list[Finding], dict[str, str]] | None:
    """A job whose AM still runs: the findings it worked out, and its configuration from the
    staging dir (readable by its owner while it runs)."""
    home = gw.call("home directory", gw.fs.homeDirectory)
    staging = f"{home}/{STAGING_ROOT}/{app_id}"
    secret_path = f"{staging}/tony-secret"
    if not gw.call("look for the secret", gw.fs.exists, secret_path):
        return None  # over (its staging dir is gone), or not ours
    job = Job(gw, app_id, gw.call("read the secret", gw.fs.readText, secret_path).strip(), staging)
    job.refresh()
    if job.report.get("state") != "RUNNING" or not job.am_status or "advice" not in job.am_status:
        return None
    final_conf = f"{staging}/tony-final.xml"
    props = parse_xml(gw.call("read the job's configuration", gw.fs.readText, final_conf).encode(), final_conf) \
        if gw.call("look for the configuration", gw.fs.exists, final_conf) else {}
    return app_id, [Finding.from_dict(f) for f in job.am_status["advice"]], props


def write(path: str, props: dict[str, str], findings: list[Finding]) -> None:
    if not props:
        raise UsageError(f"--write {path}: the job's configuration (tony-final.xml) is not in its history")
    defaults = parse_xml(DEFAULTS_PATH.read_bytes(), str(DEFAULTS_PATH))
    try:
        Path(path).write_text(to_xml(report.applied(props, defaults, findings)))
    except OSError as exc:
        raise UsageError(f"--write {path}: {exc.strerror}") from exc
