"""`tony logs`: one log of one task, without a browser.

    tony logs APP_ID [--task worker:1] [--attempt N] [--file stdout|stderr|executor|am] [-f]

The task defaults to the chief; the attempt to the task's latest; the file to stdout (the user
process's). A container that still has its logs on its node is read from the NodeManager's web
server (`-f` follows it); once YARN aggregated them (the application ended), they are read
through Hadoop's own log-reading classes in the client's JVM, into a local file.
"""

from __future__ import annotations

import html
import re
import sys
import tempfile
import time
from pathlib import Path

import requests

from tony_py import spnego
from tony_py.auth import AuthError, Signer, call_json, client_principal
from tony_py.bridge.gateway import ClientGateway
from tony_py.client.flags import Parser
from tony_py.client.job import FINAL_STATES
from tony_py.client.staging import STAGING_ROOT
from tony_py.errors import TonyError, UsageError
from tony_py.history.store import HistoryStore

FILES = {"stdout": "attempt-{n}.stdout", "stderr": "attempt-{n}.stderr", "executor": "executor.log", "am": "am.log"}
FOLLOW_POLL_S = 1.0
AGGREGATION_WAIT_S = 60.0  # a job that just ended: its NodeManagers upload its logs within seconds
_LOG_URL = re.compile(r"^(https?://[^/]+)/node/containerlogs/([^/]+)/([^/?]+)")
_PRE = re.compile(r"<pre[^>]*>(.*?)</pre>", re.S)
# The NodeManager's answer when SecureIOUtils finds the file is not the job owner's (ContainerLogsUtils).
_NOT_OWNER = re.compile(r"(?:Application submitted by|User) '([^']+)' doesn't own requested log file")


def log_location(gw, app_id: str, task: str | None, attempt: int | None, which: str) -> tuple[str, str, str, str]:
    """(NodeManager web address, container id, owner, file name) of the log asked for."""
    report = gw.json("read the application report", gw.bridge.report, app_id)
    rows, am_log, chief = _tasks_running(gw, app_id, report) if report.get("state") == "RUNNING" else ([], None, None)
    if not rows:
        home = gw.call("home directory", gw.fs.homeDirectory)
        summary = HistoryStore.for_user(gw).find(app_id)
        if summary is None:
            raise UsageError(f"{app_id}: its AM is not running and it has no job history under {home}")
        rows, am_log = summary.get("tasks") or [], summary.get("am_log_url")
        chief = next((t["name"] for t in rows if t["name"] in ("chief:0", "worker:0")), rows[0]["name"] if rows else None)
    if which == "am":
        url = am_log
        name = FILES["am"]
    else:
        wanted = task or chief
        row = next((t for t in rows if t["name"] == wanted), None)
        if row is None:
            raise UsageError(f"--task {wanted}: no such task in {app_id} (tasks: {', '.join(t['name'] for t in rows)})")
        url = row.get("log_url")
        name = FILES[which].format(n=row.get("attempt", 0) if attempt is None else attempt)
    m = _LOG_URL.match(url or "")
    if not m:
        raise UsageError(f"{app_id}: no log location recorded for that task")
    return m.group(1), m.group(2), m.group(3), name


def _tasks_running(gw, app_id: str, report: dict) -> tuple[list[dict], str | None, str | None]:
    """The AM's task table (signed with the secret from the staging dir, for full detail)."""
    home = gw.call("home directory", gw.fs.homeDirectory)
    secret_path = f"{home}/{STAGING_ROOT}/{app_id}/tony-secret"
    if not gw.call("look for the secret", gw.fs.exists, secret_path):
        return [], None, None
    signer = Signer(gw.call("read the secret", gw.fs.readText, secret_path).strip(), client_principal())
    try:
        code, status = call_json(signer, report.get("original_tracking_url") or "", "GET", "/status.json", None, 5)
    except (OSError, ValueError, AuthError):  # not answered, or not by the job's AM: the logs still come
        return [], None, None
    if code != 200:
        return [], None, None
    rows = status.get("tasks") or []
    chief = next((t["name"] for t in rows if t["name"] in ("chief:0", "worker:0")), rows[0]["name"] if rows else None)
    return rows, status.get("am_log_url"), chief


def read_node_log(http, node: str, container: str, owner: str, name: str, start: int = 0) -> str | None:
    """From the NodeManager's web page (it takes a byte offset); None if it no longer has it, or
    would not hand it over (node_log_problem says why)."""
    url = f"{node}/node/containerlogs/{container}/{owner}/{name}/?start={start}"
    try:
        resp = http.get(url, timeout=10)
    except requests.RequestException:
        return None
    page = resp.text if resp.status_code == 200 else ""
    blocks = _PRE.findall(page)
    if not blocks or "No logs available" in page or "Logs not available" in page:
        return None
    return html.unescape(blocks[0])


def node_log_problem(http, node: str, container: str, name: str) -> str | None:
    """Why the NodeManager did not hand the log over, where it said so (asked through its REST
    API, whose error names the cause), for the error message; None when it simply has no such log."""
    url = f"{node}/ws/v1/node/containerlogs/{container}/{name}"
    try:
        resp = http.get(url, timeout=10)
    except spnego.SpnegoError as exc:  # its web UI wants Kerberos, and this user has none it takes
        return str(exc)
    except requests.RequestException as exc:
        return f"the NodeManager at {node} cannot be reached ({exc.__class__.__name__}: {exc})"
    if resp.status_code == 200:
        return None
    body = resp.text[:4096]
    refused = _NOT_OWNER.search(body)
    if refused:
        return f"the NodeManager at {node} refuses to read it: {owner_refused(refused.group(1))}"
    if "SecureIOUtils" in body:
        return (f"the NodeManager at {node} cannot open container logs: under Kerberos it needs Hadoop's "
                "native library (libhadoop.so), which it lacks; the cluster's administrator can install it")
    return None if resp.status_code == 404 else f"the NodeManager at {node} answered HTTP {resp.status_code}"


def owner_refused(owner: str) -> str:
    """Why a secure cluster keeps a job's logs from its owner, and what an operator does about it."""
    return (f"under Kerberos a NodeManager reads a job's logs only if the job's owner ({owner}) owns the files, and "
            "its DefaultContainerExecutor writes them as the NodeManager's own OS user; the cluster's administrator "
            "can switch the NodeManagers to the LinuxContainerExecutor, which runs containers (and writes their "
            "logs) as the job's owner")


def aggregation_problem(gw, app_id: str, owner: str) -> str | None:
    """Why YARN's aggregated logs lack the log, where they show it: the RM says aggregation
    succeeded, yet the app's dir holds no node's file. A node uploads its file only if it could
    open some log; so none of them could open any."""
    report = gw.json("read the application report", gw.bridge.report, app_id)
    if report.get("log_aggregation") != "SUCCEEDED":
        return None
    try:
        nodes = gw.json("list the aggregated logs", gw.bridge.aggregatedLogNodes, app_id, owner)
    except TonyError:  # unreadable: nothing to tell from them
        return None
    return f"YARN aggregated none of the job's logs: {owner_refused(owner)}" if nodes == [] else None


def aggregated_when_done(gw, app_id: str, owner: str, container: str, name: str) -> str | None:
    """The log from YARN's aggregated logs; for a job that just ended, once its NodeManagers are
    done uploading (the RM says so), at most AGGREGATION_WAIT_S: its nodes no longer serve it."""
    deadline = time.monotonic() + AGGREGATION_WAIT_S
    while True:
        try:
            text = read_aggregated_log(gw, app_id, owner, container, name)
        except TonyError as exc:
            if "does not exist" not in str(exc):
                raise
            text = None
        if text is not None:
            return text
        report = gw.json("read the application report", gw.bridge.report, app_id)
        pending = report.get("state") in FINAL_STATES and report.get("log_aggregation") in ("NOT_START", "RUNNING")
        if not pending or time.monotonic() > deadline:
            return None
        time.sleep(FOLLOW_POLL_S)


def read_aggregated_log(gw, app_id: str, owner: str, container: str, name: str) -> str | None:
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "log"
        if not gw.call("read the aggregated log", gw.bridge.fetchAggregatedLog, app_id, owner, container, name,
                       str(local)):
            return None
        return strip_framing(local.read_text(errors="replace"))


def strip_framing(text: str) -> str:
    """YARN's aggregated-log framing around the file's content."""
    start = text.find("LogContents:\n")
    if start < 0:
        return text
    body = text[start + len("LogContents:\n"):]
    end = body.rfind("\nEnd of LogType:")
    return body[:end + 1] if end >= 0 else body


def main(argv: list[str], prog: str = "tony logs") -> int:
    parser = Parser(prog=prog, description="Print a task's log (running or finished job).")
    parser.add_argument("app_id")
    parser.add_argument("--task", help="e.g. worker:1 (default: the chief)")
    parser.add_argument("--attempt", type=int, help="gang attempt (default: the task's latest)")
    parser.add_argument("--file", default="stdout", choices=sorted(FILES))
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing what is added")
    try:
        opts = parser.parse_args(argv)
        http = spnego.session()  # the NodeManagers' pages: with the user's ticket where they want one
        with ClientGateway() as gw:
            node, container, owner, name = log_location(gw, opts.app_id, opts.task, opts.attempt, opts.file)
            text = read_node_log(http, node, container, owner, name)
            if text is None:
                text = aggregated_when_done(gw, opts.app_id, owner, container, name)
            if text is None:
                problem = aggregation_problem(gw, opts.app_id, owner) or node_log_problem(http, node, container, name)
                if problem:
                    raise TonyError(f"{name} of {container}: {problem}")
                raise UsageError(f"{name} of {container}: not on its node and not (yet) in YARN's aggregated logs "
                                 "(a cluster without yarn.log-aggregation-enable keeps no logs of finished jobs)")
            sys.stdout.write(text)
            sys.stdout.flush()
            offset = len(text.encode())
            while opts.follow:
                time.sleep(FOLLOW_POLL_S)
                more = read_node_log(http, node, container, owner, name, start=offset)
                if more:
                    sys.stdout.write(more)
                    sys.stdout.flush()
                    offset += len(more.encode())
                report = gw.json("read the application report", gw.bridge.report, opts.app_id)
                if report.get("state") in FINAL_STATES and not more:
                    break
        return 0
    except TonyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
