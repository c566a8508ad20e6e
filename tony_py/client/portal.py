"""`tony portal`: a small web app over the job history (TonY's portal, without Play).

    tony portal [--port 19886] [--host 127.0.0.1]

Pages: / (jobs, with filters: user, status, tag, since), /jobs/<appId> (summary, root cause,
tasks with their metrics and log links, the events timeline), /jobs/<appId>/config (env values
masked). Same look as the AM's page. It binds to 127.0.0.1 unless told otherwise (--host),
reads the history of the user running it, and keeps the job list for CACHE_S seconds (TonY's
portal rescanned the history on every page load).

Only for the user who started it: on a shared gateway 127.0.0.1 is every user's. Every page
lives under a random path prefix (/<token>/) that only the printed URL carries, a request whose
Host is not a name of this machine is refused (a web page that rebinds its DNS name to
127.0.0.1), and no page sends a Referer (log links point to other servers).
"""

from __future__ import annotations

import argparse
import hmac
import secrets
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlparse

from tony_py.advice import report as advice_report
from tony_py.advice.model import Finding
from tony_py.bridge.gateway import ClientGateway
from tony_py.client.flags import Parser
from tony_py.client.history_cmd import matches
from tony_py.config.layers import load_conf
from tony_py.errors import TonyError
from tony_py.history.store import HistoryStore, parse_since
from tony_py.web.page import duration, esc, frame, safe_url, size, when

CACHE_S = 10.0
DEFAULT_PORT = 19886  # TonY's portal port


def advice_section(findings: list[dict] | None) -> list[str]:
    """The job's findings as its AM kept them in job.json (tony_py/advice), most pressing first."""
    if not findings:
        return []
    items = "".join(
        f"<li data-heuristic='{esc(f['heuristic'])}'><span class='severity {esc(f['severity'])}'>{esc(f['severity'])}</span> "
        f"{esc(f['heuristic'])} {esc(f.get('task_type') or '')}: {esc(f['evidence'])}<br>"
        f"<code>{esc(Finding.from_dict(f).suggestion.flag())}</code></li>" for f in findings)
    return [f"<section id='advice'><h2>Advice ({len(findings)})</h2><div class='body'><ol class='advice'>{items}</ol>"
            "</div></section>"]


class Portal:
    def __init__(self, store: HistoryStore, retention_s: int = 0):
        self.store = store
        self.retention_s = retention_s
        self._jobs: list[dict] = []
        self._at = 0.0
        self._lock = threading.Lock()

    def jobs(self) -> list[dict]:
        with self._lock:
            if time.monotonic() - self._at > CACHE_S:
                if self.retention_s:
                    self.store.purge(self.retention_s)
                self._jobs, self._at = self.store.summaries(), time.monotonic()
            return self._jobs

    def job(self, app_id: str) -> dict | None:
        return next((j for j in self.jobs() if j.get("app_id") == app_id), None)

    # ---- pages -------------------------------------------------------------------------------------
    def index(self, query: dict) -> bytes:
        get = {k: v[0] for k, v in query.items() if v and v[0]}
        try:
            since = parse_since(get["since"]) if get.get("since") else None
        except ValueError:
            since = None
        jobs = [j for j in self.jobs() if matches(j, get.get("user"), get.get("status"), since, get.get("tag"))]
        if get.get("sort") == "waste":  # the jobs that asked most for what they did not use
            jobs = sorted(jobs, key=lambda j: -advice_report.waste_cost(j.get("waste")))
        options = "".join(f"<option{' selected' if get.get('status') == s else ''}>{s}</option>"
                          for s in ("", "SUCCEEDED", "FAILED", "KILLED"))
        form = (f"<form class='filters' method='get'><label>user <input name='user' value='{esc(get.get('user'))}'></label>"
                f"<label>status <select name='status'>{options}</select></label>"
                f"<label>tag <input name='tag' value='{esc(get.get('tag'))}'></label>"
                f"<label>since <input name='since' placeholder='7d' size='4' value='{esc(get.get('since'))}'></label>"
                f"<label><input type='checkbox' name='sort' value='waste'{' checked' if get.get('sort') == 'waste' else ''}>"
                " most waste first</label><button>filter</button></form>")
        rows = "".join(
            f"<tr data-app='{esc(j['app_id'])}'><td><a href='jobs/{quote(j['app_id'])}'>{esc(j['app_id'])}</a></td>"
            f"<td>{esc(j.get('name'))}</td><td>{esc(j.get('user'))}</td>"
            f"<td class='state {esc(j.get('final_status'))}'>{esc(j.get('final_status'))}</td>"
            f"<td>{when(j.get('started_at'))}</td><td>{duration((j.get('finished_at') or 0) - (j.get('started_at') or 0))}</td>"
            f"<td>{len(j.get('tasks') or [])}</td><td>{esc(', '.join(j.get('tags') or []))}</td>"
            f"<td class='waste'>{esc(advice_report.waste_text(j.get('waste')))}</td>"
            f"<td><a href='jobs/{quote(j['app_id'])}/config'>config</a></td></tr>" for j in jobs)
        table = ("<table id='jobs'><thead><tr><th>application</th><th>name</th><th>user</th><th>status</th>"
                 "<th>started</th><th>duration</th><th>tasks</th><th>tags</th><th>asked, not used</th><th></th></tr></thead>"
                 f"<tbody>{rows}</tbody></table>") if jobs else "<p class='muted'>No jobs match.</p>"
        body = f"<section>{form}</section><section><h2>Jobs ({len(jobs)})</h2><div class='body'>{table}</div></section>"
        return frame("TonY-py jobs", "TonY-py jobs", esc(self.store.finished_root), body)

    def job_page(self, app_id: str) -> bytes | None:
        j = self.job(app_id)
        if j is None:
            return None
        am_log = safe_url(j.get("am_log_url"))
        facts = "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in (
            ("status", f"<span class='state {esc(j.get('final_status'))}'>{esc(j.get('final_status'))}</span>"),
            ("message", esc(j.get("message"))), ("user", esc(j.get("user"))), ("queue", esc(j.get("queue"))),
            ("framework", esc(j.get("framework"))), ("submitted", when(j.get("submitted_at"))),
            ("finished", when(j.get("finished_at"))), ("restarts", esc(j.get("restarts_used"))),
            ("AM log", f"<a href='{esc(am_log)}'>am.log</a>" if am_log else ""),
            ("TensorBoard", esc(j.get("tensorboard_url"))),
            ("config", f"<a href='{quote(app_id)}/config'>tony-final.xml</a>"),  # (this page is jobs/<id>)
        ) if v not in ("", None, "None"))
        sections = [f"<section id='job'><h2>Job</h2><div class='body'><dl>{facts}</dl></div></section>"]
        sections += advice_section(j.get("advice"))
        rc = j.get("root_cause")
        if rc:
            sections.append(f"<section id='root-cause'><h2>Root cause</h2><div class='body root'>"
                            f"{esc(rc.get('task'))} (attempt {esc(rc.get('attempt'))}): {esc(rc.get('message'))}"
                            f"<pre>{esc(rc.get('stderr_tail'))}</pre></div></section>")
        task_rows = ""
        for t in j.get("tasks") or []:
            m = t.get("metrics") or {}
            logs, log_url = "", safe_url(t.get("log_url"))
            if log_url:
                n = t.get("attempt") or 0
                logs = " · ".join(f"<a href='{esc(log_url.rstrip('/'))}/{f}/?start=0'>{label}</a>" for label, f in
                                  (("stdout", f"attempt-{n}.stdout"), ("stderr", f"attempt-{n}.stderr"),
                                   ("executor", "executor.log")))
            task_rows += (f"<tr data-task='{esc(t['name'])}'><td>{esc(t['name'])}</td>"
                          f"<td class='state {esc(t.get('state'))}'>{esc(t.get('state'))}</td><td>{esc(t.get('host'))}</td>"
                          f"<td>{esc(t.get('signal') or t.get('exit_code'))}</td><td>{size(m.get('MAX_MEMORY_BYTES'))}</td>"
                          f"<td>{size(m.get('AVG_MEMORY_BYTES'))}</td><td>{esc(m.get('AVG_CPU_UTILIZATION'))}</td>"
                          f"<td>{esc(m.get('MAX_GPU_UTILIZATION'))}</td><td>{logs}</td></tr>")
        sections.append("<section id='tasks-section'><h2>Tasks</h2><div class='body'><table id='tasks'><thead><tr>"
                        "<th>task</th><th>state</th><th>host</th><th>exit</th><th>max memory</th><th>avg memory</th>"
                        "<th>avg CPU %</th><th>max GPU %</th><th>logs</th></tr></thead>"
                        f"<tbody>{task_rows}</tbody></table></div></section>")
        events = "".join(f"<tr><td class='muted'>{when(e.get('ts'))}</td><td>{esc(e.get('kind'))}</td>"
                         f"<td>{esc(e.get('task'))}</td><td>{esc(e.get('message'))}</td></tr>"
                         for e in self.store.events(j))
        sections.append("<section id='timeline'><h2>Timeline</h2><div class='body'><table id='events'><thead><tr>"
                        f"<th>time</th><th>event</th><th>task</th><th>what</th></tr></thead><tbody>{events}</tbody>"
                        "</table></div></section>")
        return frame(f"TonY-py {app_id}", f"<a href='../'>jobs</a> / {esc(app_id)}", esc(j.get("name")),
                     "".join(sections))

    def config_page(self, app_id: str) -> bytes | None:
        j = self.job(app_id)
        if j is None:
            return None
        rows = "".join(f"<tr><td>{esc(k)}</td><td>{esc(masked(k, v))}</td></tr>"
                       for k, v in sorted(self.store.config(j).items()))
        body = (f"<section><h2>tony-final.xml</h2><div class='body'><table id='config'><thead><tr><th>key</th>"
                f"<th>value</th></tr></thead><tbody>{rows}</tbody></table></div></section>")
        return frame(f"TonY-py {app_id} config", f"<a href='../../'>jobs</a> / <a href='../{quote(app_id)}'>"
                                                 f"{esc(app_id)}</a> / config", "", body)


def masked(key: str, value: str) -> str:
    """tony.execution.envs (--shell_env) and tony.containers.envs (--container_env): names
    only, values hidden (they may be credentials)."""
    if not key.endswith(".envs"):
        return value
    return ",".join(f"{item.split('=', 1)[0].strip()}=***" if "=" in item else "***"
                    for item in value.split(",") if item.strip())


def allowed_hosts(host: str, port: int) -> frozenset[str]:
    """Host header values this portal answers: its own names and addresses, with the port."""
    names = {"localhost", "127.0.0.1", "[::1]", socket.gethostname(), socket.getfqdn()}
    if host not in ("", "0.0.0.0", "::"):
        names.add(f"[{host}]" if ":" in host else host)
    try:
        names.update(socket.gethostbyname_ex(socket.gethostname())[2])
    except OSError:
        pass
    return frozenset(f"{name.lower()}:{port}" for name in names)


def make_server(portal: Portal, host: str, port: int, token: str | None = None) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, fmt, *args):
            pass

        def do_GET(self):
            url = urlparse(self.path)
            if self.headers.get("Host", "").lower() not in self.server.hosts:
                return self._send(403, frame("TonY-py", "Forbidden", "unknown Host", ""))
            parts = [p for p in url.path.split("/") if p]
            if not parts or not hmac.compare_digest(parts[0].encode(), self.server.token.encode()):
                return self._send(403, frame("TonY-py", "Forbidden", "open the URL `tony portal` printed", ""))
            if len(parts) == 1 and not url.path.endswith("/"):  # the index's links are relative to /<token>/
                return self._redirect(f"/{self.server.token}/")
            parts = parts[1:]
            try:
                if not parts:
                    page = portal.index(parse_qs(url.query))
                elif len(parts) == 2 and parts[0] == "jobs":
                    page = portal.job_page(parts[1])
                elif len(parts) == 3 and parts[0] == "jobs" and parts[2] == "config":
                    page = portal.config_page(parts[1])
                else:
                    page = None
            except TonyError as exc:
                return self._send(502, frame("TonY-py", "History unavailable", esc(exc), ""))
            if page is None:
                return self._send(404, frame("TonY-py", "Not found", esc("/".join(parts)), ""))
            self._send(200, page)

        def _redirect(self, location: str) -> None:
            self.send_response(301)
            self.send_header("Location", location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _send(self, code: int, body: bytes) -> None:
            self.send_response(code)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Referrer-Policy", "no-referrer")  # the token is in every page's URL
            self.end_headers()
            self.wfile.write(body)

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    server.token = token or secrets.token_urlsafe(24)
    server.hosts = allowed_hosts(host, server.server_address[1])
    return server


def main(argv: list[str], prog: str = "tony portal") -> int:
    parser = Parser(prog=prog, description="Serve the job history as web pages.")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: this machine only)")
    parser.add_argument("--conf", action="append", default=[], metavar="K=V", help="tony.history.* override")
    try:
        opts = parser.parse_args(argv)
        conf = load_conf(None, opts.conf)
        with ClientGateway() as gw:
            portal = Portal(HistoryStore.for_user(gw, conf.get), int(conf.get("tony.history.retention-sec") or 0))
            server = make_server(portal, opts.host, opts.port)
            print(f"TonY-py portal on http://{opts.host}:{server.server_address[1]}/{server.token}/ "
                  "(for you only: do not share this URL; Ctrl-C stops it)", flush=True)
            try:
                server.serve_forever()
            except KeyboardInterrupt:
                pass
        return 0
    except TonyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"{prog}: error: cannot listen on {opts.host}:{opts.port}: {exc.strerror}", file=sys.stderr)
        return 2
