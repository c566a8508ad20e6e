"""The AM's one HTTP server: the executor API and the tracking URL.

- /v1/* is the executor API. Every call must carry the per-application secret
  (`Authorization: Bearer <secret>`); anything else gets 401 and changes nothing.
- /status.json (and / for people) is the read-only job status behind YARN's tracking URL.
It binds to the AM container's host address only, never to a wildcard address.

Python's ThreadingHTTPServer is enough here: a few dozen executors, small JSON bodies, and
long-polls that park a thread each.
"""

from __future__ import annotations

import hmac
import html
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlparse

from tony_py.am.coordinator import Coordinator

log = logging.getLogger("tony.am.server")

MAX_BODY = 1 << 20
MAX_LONG_POLL_S = 30.0


class AmHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, address, coordinator: Coordinator, secret: str, status: Callable[[], dict]):
        self.coordinator = coordinator
        self.secret = secret.encode()
        self.status_fn = status
        self.final_status_served = threading.Event()
        super().__init__(address, _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]


class _Handler(BaseHTTPRequestHandler):
    server: AmHttpServer
    protocol_version = "HTTP/1.1"
    timeout = 60  # socket reads; long-polls wait in the coordinator, not on the socket

    def log_message(self, fmt, *args):  # route the stdlib's access log to logging, quietly
        log.debug("%s %s", self.address_string(), fmt % args)

    # ---- plumbing --------------------------------------------------------------------------
    def _send(self, code: int, payload: dict | None = None, content_type="application/json", body: bytes = b""):
        if payload is not None:
            body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _authorized(self) -> bool:
        header = self.headers.get("Authorization", "")
        token = header[7:].encode() if header.startswith("Bearer ") else b""
        return hmac.compare_digest(token, self.server.secret)

    def _body(self) -> dict:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise ValueError("body too large")
        raw = self.rfile.read(length) if length else b"{}"
        data = json.loads(raw or b"{}")
        if not isinstance(data, dict):
            raise ValueError("body must be a JSON object")
        return data

    # ---- routes ----------------------------------------------------------------------------
    def do_GET(self):
        url = urlparse(self.path)
        if url.path in ("/status.json", "/api/status"):
            status = self.server.status_fn()
            if status.get("state") == "DONE":
                self.server.final_status_served.set()
            return self._send(200, status)
        if url.path in ("/", "/index.html"):
            return self._send(200, content_type="text/html; charset=utf-8", body=_html(self.server.status_fn()))
        if url.path == "/v1/spec":
            if not self._authorized():
                return self._send(401, {"error": "missing or wrong application secret"})
            q = {k: v[0] for k, v in parse_qs(url.query).items()}
            try:
                timeout = min(float(q.get("timeout", "20")), MAX_LONG_POLL_S)
                answer = self.server.coordinator.wait_spec(
                    q["task"], int(q["attempt"]), q.get("container", ""), timeout
                )
            except (KeyError, ValueError) as exc:
                return self._send(400, {"error": f"bad request: {exc}"})
            return self._send(204) if answer is None else self._send(200, answer)
        return self._send(404, {"error": "not found"})

    def do_POST(self):
        url = urlparse(self.path)
        if not url.path.startswith("/v1/"):
            return self._send(404, {"error": "not found"})
        if not self._authorized():
            return self._send(401, {"error": "missing or wrong application secret"})
        try:
            body = self._body()
            c = self.server.coordinator
            task, attempt, container = body["task"], int(body["attempt"]), body.get("container", "")
            if url.path == "/v1/register":
                answer = c.register(task, attempt, container, int(body["port"]), body.get("tb_port"),
                                    body.get("control_port"))
            elif url.path == "/v1/started":
                answer = c.task_started(task, attempt, container, int(body.get("pid") or 0))
            elif url.path == "/v1/heartbeat":
                answer = c.heartbeat(task, attempt, container, body.get("metrics"), body.get("progress_age_s"))
            elif url.path == "/v1/result":
                answer = c.report_result(
                    task, attempt, container,
                    exit_code=body.get("exit_code"),
                    signal=body.get("signal"),
                    stderr_tail=body.get("stderr_tail") or "",
                    error=body.get("error"),
                    timed_out=bool(body.get("timed_out")),
                    ended_ago_s=body.get("ended_ago_s"),
                    metrics=body.get("metrics"),
                )
            else:
                return self._send(404, {"error": "not found"})
        except (KeyError, ValueError, TypeError) as exc:
            return self._send(400, {"error": f"bad request: {exc}"})
        return self._send(200, answer)


def _html(status: dict) -> bytes:
    """A minimal page for people who open the tracking URL (the full UI is a later issue)."""
    rows = "".join(
        "<tr>" + "".join(
            f"<td>{html.escape(str(v))}</td>"
            for v in (t["name"], t["state"], t.get("host") or "", t.get("exit_code") if t.get("exit_code") is not None else "")
        ) + (f"<td><a href='{html.escape(t['log_url'])}'>logs</a></td>" if t.get("log_url") else "<td></td>") + "</tr>"
        for t in status.get("tasks", [])
    )
    diag = html.escape(status.get("diagnostics") or "")
    page = (
        "<!doctype html><html><head><meta charset='utf-8'><title>TonY-py "
        f"{html.escape(status.get('app_id', ''))}</title></head><body>"
        f"<h1>{html.escape(status.get('app_id', ''))} — {html.escape(status.get('state', ''))}</h1>"
        "<table border='1' cellpadding='4'><tr><th>task</th><th>state</th><th>host</th><th>exit</th>"
        f"<th></th></tr>{rows}</table><pre>{diag}</pre>"
        "<p><a href='status.json'>status.json</a></p></body></html>"
    )
    return page.encode()
