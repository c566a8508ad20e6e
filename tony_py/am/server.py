"""The AM's one HTTP server: the executor API and the tracking URL.

- /v1/* is the executor API. Every request must be signed with the application's secret and
  be fresh (tony_py/auth.py); anything else gets 401 and changes nothing. Every answer is
  signed for the request it answers, so executors can tell the real AM from a stranger.
- /status.json and / are the job's status behind YARN's tracking URL. Full detail (hosts,
  diagnostics, stderr tails, tracebacks) goes to requests that are signed (the client) or that
  come from YARN's web proxy (which authenticates users on a secure cluster; Hadoop's AmIpFilter
  trusts the same source addresses); anyone else sees task states only.

It binds to the AM container's host address only, never to a wildcard address. Connections
are capped (a flood of idle sockets gets 503, not a thread each), a request must arrive within
a few seconds, and bodies need a valid Content-Length no larger than 1 MiB.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable
from urllib.parse import parse_qs, urlparse

from tony_py.am import dashboard
from tony_py.am.coordinator import Coordinator
from tony_py.auth import REQUEST_HEADER, RESPONSE_HEADER, AuthError, Verifier

log = logging.getLogger("tony.am.server")

MAX_BODY = 1 << 20
MAX_LONG_POLL_S = 30.0
REQUEST_TIMEOUT_S = 5.0  # to send a whole request; long-polls wait in the coordinator, not here
MAX_METRICS = 64


class BadRequest(ValueError):
    """A request that names the wrong things or numbers out of range: 400, nothing changed."""

    status = 400


class TooLarge(BadRequest):
    status = 413


class AmHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False
    request_queue_size = 128

    def __init__(self, address, coordinator: Coordinator, verifier: Verifier, status: Callable[[bool], dict],
                 trusted_addresses: frozenset[str] = frozenset(), max_connections: int = 256):
        self.coordinator = coordinator
        self.verifier = verifier
        self.status_fn = status
        self.trusted_addresses = trusted_addresses
        self.final_status_served = threading.Event()
        self._slots = threading.BoundedSemaphore(max_connections)
        super().__init__(address, _Handler)

    @property
    def port(self) -> int:
        return self.server_address[1]

    # ---- connection cap --------------------------------------------------------------------
    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            try:
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()


class _Handler(BaseHTTPRequestHandler):
    server: AmHttpServer
    protocol_version = "HTTP/1.1"
    timeout = REQUEST_TIMEOUT_S

    def log_message(self, fmt, *args):  # route the stdlib's access log to logging, quietly
        log.debug("%s %s", self.address_string(), fmt % args)

    # ---- plumbing --------------------------------------------------------------------------
    def _send(self, code: int, payload: dict | None = None, content_type="application/json", body: bytes = b"",
              nonce: tuple[str, int] | None = None):
        if payload is not None:
            body = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        if nonce is not None:
            self.send_header(RESPONSE_HEADER, self.server.verifier.sign_answer(nonce, code, body))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _read_body(self) -> bytes:
        raw = self.headers.get("Content-Length")
        if raw is None:
            if self.command == "POST":
                raise BadRequest("Content-Length is required")
            return b""
        try:
            length = int(raw)
        except ValueError:
            raise BadRequest(f"bad Content-Length {raw!r}") from None
        if length < 0:
            raise BadRequest(f"bad Content-Length {raw!r}")
        if length > MAX_BODY:
            raise TooLarge(f"the body is larger than {MAX_BODY} bytes")
        return self.rfile.read(length) if length else b""

    def _verified(self, body: bytes) -> tuple[str, int] | None:
        """The request's nonce if it is signed with the app secret and fresh, else None."""
        try:
            return self.server.verifier.check(self.command, self.path, body, self.headers.get(REQUEST_HEADER))
        except AuthError:
            return None

    def _viewer(self) -> tuple[bool, tuple[str, int] | None]:
        """(full detail?, the nonce to sign the answer for): a signed request (the client) or
        one relayed by YARN's web proxy sees everything; anyone else sees states only."""
        if self.headers.get(REQUEST_HEADER):
            nonce = self._verified(b"")
            return nonce is not None, nonce
        return self.client_address[0] in self.server.trusted_addresses, None

    # ---- routes ----------------------------------------------------------------------------
    def do_GET(self):
        try:
            self._read_body()
        except BadRequest as exc:
            self.close_connection = True  # what was not read must not be taken for the next request
            return self._send(exc.status, {"error": str(exc)})
        url = urlparse(self.path)
        if url.path in ("/status.json", "/api/status"):
            trusted, nonce = self._viewer()
            status = self.server.status_fn(trusted)
            if status.get("state") == "DONE" and nonce is not None:  # the client (signed) has the final table
                self.server.final_status_served.set()
            return self._send(200, status, nonce=nonce)
        if url.path in ("/", "/index.html"):
            trusted, nonce = self._viewer()
            page = dashboard.render(self.server.status_fn(trusted))
            return self._send(200, content_type="text/html; charset=utf-8", body=page, nonce=nonce)
        if url.path == "/v1/spec":
            nonce = self._verified(b"")
            if nonce is None:
                return self._send(401, {"error": "unsigned, wrongly signed or replayed request"})
            try:
                q = {k: v[0] for k, v in parse_qs(url.query, strict_parsing=False).items()}
                answer = self.server.coordinator.wait_spec(
                    _text(q, "task"), _int(q, "attempt", 0, 1 << 20), _text(q, "container", ""),
                    _seconds(q, "timeout", 0.0, MAX_LONG_POLL_S, default=20.0))
            except BadRequest as exc:
                return self._send(400, {"error": f"bad request: {exc}"}, nonce=nonce)
            return self._send(204, nonce=nonce) if answer is None else self._send(200, answer, nonce=nonce)
        return self._send(404, {"error": "not found"})

    def do_POST(self):
        try:
            body = self._read_body()
        except BadRequest as exc:
            self.close_connection = True  # what was not read must not be taken for the next request
            return self._send(exc.status, {"error": str(exc)})
        url = urlparse(self.path)
        if not url.path.startswith("/v1/"):
            return self._send(404, {"error": "not found"})
        nonce = self._verified(body)
        if nonce is None:
            return self._send(401, {"error": "unsigned, wrongly signed or replayed request"})
        try:
            data = json.loads(body or b"{}")
            if not isinstance(data, dict):
                raise BadRequest("the body must be a JSON object")
            answer = self._route(url.path, data)
        except (BadRequest, ValueError) as exc:
            return self._send(400, {"error": f"bad request: {exc}"}, nonce=nonce)
        if answer is None:
            return self._send(404, {"error": "not found"}, nonce=nonce)
        return self._send(200, answer, nonce=nonce)

    def _route(self, path: str, body: dict) -> dict | None:
        c = self.server.coordinator
        task, attempt, container = _text(body, "task"), _int(body, "attempt", 0, 1 << 20), _text(body, "container", "")
        if path == "/v1/register":
            return c.register(task, attempt, container, _int(body, "port", 1, 65535),
                              _int(body, "tb_port", 1, 65535, optional=True),
                              _int(body, "control_port", 1, 65535, optional=True))
        if path == "/v1/started":
            return c.task_started(task, attempt, container, _int(body, "pid", 0, 1 << 31, optional=True) or 0)
        if path == "/v1/heartbeat":
            return c.heartbeat(task, attempt, container, _metrics(body),
                               _seconds(body, "progress_age_s", 0.0, 1e9, optional=True))
        if path == "/v1/callback":
            info = body.get("info")
            if not isinstance(info, dict) or len(json.dumps(info)) > 4096:
                raise BadRequest("info must be a small JSON object")
            return c.callback(task, attempt, container, info)
        if path == "/v1/tensorboard":
            url = _text(body, "url", limit=300)
            if not url.startswith("http://"):
                raise BadRequest("url must be an http:// URL")
            return c.register_tensorboard(task, attempt, container, url)
        if path == "/v1/result":
            return c.report_result(
                task, attempt, container,
                exit_code=_int(body, "exit_code", -(1 << 31), (1 << 31) - 1, optional=True),
                signal=_text(body, "signal", None, limit=40),
                stderr_tail=_text(body, "stderr_tail", "", limit=64 * 1024),
                error=_error(body),
                timed_out=body.get("timed_out") is True,
                ended_ago_s=_seconds(body, "ended_ago_s", 0.0, 3600.0, optional=True),
                metrics=_metrics(body),
            )
        return None


# ---- request values: every number finite and in range, every text bounded ----------------------
def _text(data: dict, key: str, default: str | None | type = BadRequest, limit: int = 200) -> str | None:
    value = data.get(key)
    if value is None:
        if default is BadRequest:
            raise BadRequest(f"{key} is required")
        return default
    if not isinstance(value, str) or len(value) > limit:
        raise BadRequest(f"{key} must be text of at most {limit} characters")
    return value


def _number(data: dict, key: str, optional: bool, default=None):
    value = data.get(key)
    if value is None:
        if optional or default is not None:
            return default
        raise BadRequest(f"{key} is required")
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            raise BadRequest(f"{key} must be a number, got {value[:40]!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"{key} must be a finite number")
    return value


def _int(data: dict, key: str, low: int, high: int, optional: bool = False) -> int | None:
    """An identifier (port, attempt, pid, exit code): out of range is an error, not clamped."""
    value = _number(data, key, optional)
    if value is None:
        return None
    if value != int(value) or not low <= value <= high:
        raise BadRequest(f"{key} must be a whole number in {low}..{high}")
    return int(value)


def _seconds(data: dict, key: str, low: float, high: float, optional: bool = False,
             default: float | None = None) -> float | None:
    """A duration: clamped to its documented range."""
    value = _number(data, key, optional, default)
    return None if value is None else min(max(float(value), low), high)


def _metrics(body: dict) -> dict | None:
    metrics = body.get("metrics")
    if metrics is None:
        return None
    if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS:
        raise BadRequest(f"metrics must be an object with at most {MAX_METRICS} entries")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or len(name) > 64:
            raise BadRequest("metric names must be short text")
        out[name] = _number(metrics, name, optional=False)
    return out


def _error(body: dict) -> dict | None:
    error = body.get("error")
    if error is None:
        return None
    if not isinstance(error, dict):
        raise BadRequest("error must be an object")
    out = {}
    for key, limit in (("type", 200), ("message", 8000), ("traceback", 32000), ("task", 100)):
        if error.get(key) is not None:
            out[key] = _text(error, key, limit=limit)
    if error.get("time") is not None:
        out["time"] = _number(error, "time", optional=True)
    return out
