"""The AM's one HTTP server: the executor API and the tracking URL, dispatched from one table.

`ROUTES` declares every route once: its method and path, who may call it, the request it takes
(tony_py/net/wire.py: the executor's side builds the same dataclasses) and its handler.

- /v1/* is the executor API (`EXECUTOR`). Every request must be signed with the application's
  secret and be fresh (tony_py/auth.py); anything else gets 401 and changes nothing. Every answer
  is signed for the request it answers, so executors can tell the real AM from a stranger. A
  value out of range is a signed 400 naming it (wire.BadRequest). GET /v1/job and /v1/src hand
  an executor what the job runs (its JobSpec, tony-final.xml, the zipped src_dir when small): a
  task container then needs no file of this job from HDFS, so its node starts it without a
  localizer (docs/decisions.md, "Start-up, measured against YARN's own floor"). Not on a Kerberos
  cluster: there this AM serves no job files (the channel is signed, not encrypted) and YARN
  localizes them. While the RM is lost, /v1/* answers 503 (no executor's lease is renewed).
- /status.json and / are the job's status behind YARN's tracking URL (`VIEWER`: anyone). Full
  detail (hosts, diagnostics, stderr tails, tracebacks) goes to requests that are signed (the
  client) or that come from YARN's web proxy (which authenticates users on a secure cluster;
  Hadoop's AmIpFilter trusts the same source addresses); anyone else sees task states only (built
  once a second).

Everything runs on one event loop (tony_py/net/httpd.py: why, and what HTTP it speaks):
executor calls are short and answered on the loop; a spec long-poll waits on the loop, woken
when the coordinator reports a change that can answer it (no thread per waiting executor); the
page and status.json are built in a small thread pool so a large job's page never delays a
heartbeat. It binds to the AM container's host address only, never to a wildcard address.
Connections are capped (idle sockets cannot fill the cap) and only signed ones stay open, a
request must arrive within a few seconds, and bodies need a valid Content-Length of <= 1 MiB.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Callable
from urllib.parse import parse_qs

from tony_py.am.core import report
from tony_py.am.core.coordinator import Coordinator
from tony_py.am.http import dashboard
from tony_py.auth import REQUEST_HEADER, RESPONSE_HEADER, AuthError, SkewError, Verifier
from tony_py.frameworks.envplan import SpecAnswer
from tony_py.net import wire
from tony_py.net.httpd import HttpServer, Recent, Request, Response
from tony_py.net.wire import BadRequest

log = logging.getLogger("tony.am.server")

MAX_BODY = 1 << 20
MAX_LONG_POLL_S = wire.MAX_LONG_POLL_S
REQUEST_TIMEOUT_S = 5.0  # to send a whole request; long-polls wait in the coordinator, not here
IDLE_TIMEOUT_S = 120.0  # an executor's connection between heartbeats (tony.task.heartbeat-interval-ms)
PUBLIC_CACHE_S = 1.0  # how stale the anonymous view may be (the page itself refreshes every 2 s)


@dataclass(frozen=True)
class JobFiles:
    """What an executor fetches before it registers."""

    job: bytes  # GET /v1/job: JSON {"spec": the JobSpec as a dict, "final_conf": tony-final.xml's text}
    src_zip: Path | None = None  # GET /v1/src: the zipped src_dir, when the AM serves it
    # Blocks until src_zip is there (the AM downloads it from the staging dir as it starts: a
    # localized copy would cost the AM's container a localizer); raises if it cannot be.
    src_ready: Callable[[], object] = lambda: None


class AmHttpServer:
    def __init__(self, address, coordinator: Coordinator | None, verifier: Verifier, status: Callable[[bool], dict],
                 trusted_addresses: frozenset[str] = frozenset(), max_connections: int = 256,
                 proxy_viewer: Callable[[str | None], bool] = lambda user: True,
                 job_files: JobFiles | None = None):
        self.verifier = verifier
        self.job_files = job_files
        self._src: asyncio.Future | None = None  # the archive's size and sha256, read once for all
        self.status_fn = status
        self.trusted_addresses = trusted_addresses
        self.proxy_viewer = proxy_viewer  # whom the proxy relays detail to (report.proxy_viewers)
        # Renewed delegation tokens, where to fetch them (tokens.py): carried by heartbeat answers.
        self.token_offer: Callable[[], dict | None] | None = None
        self.final_status_served = threading.Event()
        self.http = HttpServer(address, self._handle, max_connections=max_connections,
                               request_timeout_s=REQUEST_TIMEOUT_S, idle_timeout_s=IDLE_TIMEOUT_S, max_body=MAX_BODY)
        if not verifier.receiver:  # requests are signed for the address they are sent to (auth.py)
            verifier.receiver = f"{address[0]}:{self.http.port}"
        self._public = {page: Recent(self.http, partial(self._public_body, page), PUBLIC_CACHE_S)
                        for page in (False, True)}
        self._waiters: list[asyncio.Future] = []
        self._wake_pending = False
        self._coordinator: Coordinator | None = None
        self.coordinator = coordinator

    # ---- lifecycle (the same calls as socketserver's, which the AM used before) ---------------
    @property
    def port(self) -> int:
        return self.http.port

    def serve_forever(self, poll_interval: float | None = None) -> None:
        self.http.serve_forever()

    def shutdown(self) -> None:
        self.http.shutdown()

    def server_close(self) -> None:
        self.http.server_close()

    @property
    def coordinator(self) -> Coordinator | None:
        return self._coordinator

    @coordinator.setter
    def coordinator(self, coordinator: Coordinator | None) -> None:
        self._coordinator = coordinator
        if coordinator is not None:
            coordinator.watchers.append(self._changed)

    # ---- spec long-polls --------------------------------------------------------------------
    def _changed(self) -> None:
        """The coordinator changed something a waiting long-poll may be answered by (it calls
        this under its lock, from any thread): wake the waiters once, on the loop."""
        if not self._wake_pending:
            self._wake_pending = True
            self.http.call_soon(self._wake)

    def _wake(self) -> None:
        self._wake_pending = False
        waiters, self._waiters = self._waiters, []
        for future in waiters:
            if not future.done():
                future.set_result(None)

    async def _wait_spec(self, call: wire.SpecPoll):
        c = self.coordinator
        answer = c.try_spec(call)
        if answer is not None:
            return answer
        loop = asyncio.get_running_loop()
        deadline = loop.time() + call.timeout
        c.polling(call.task, +1)
        try:
            while answer is None:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                future = loop.create_future()
                self._waiters.append(future)
                try:
                    await asyncio.wait_for(future, remaining)
                except asyncio.TimeoutError:
                    pass
                answer = c.try_spec(call)
            return answer
        finally:
            c.polling(call.task, -1)

    # ---- requests -----------------------------------------------------------------------------
    def _handle(self, request: Request):
        """A Response for executor calls (answered at once, on the loop), or a coroutine for
        what waits: a spec long-poll, the page and status.json (built in a thread)."""
        path = request.path
        if path.startswith("/v1/") and self.coordinator is not None and self.coordinator.rm_lost:
            return _json(503, {"error": self.coordinator.rm_lost})  # renews no executor's lease meanwhile
        route = ROUTES.get((request.method, path))
        if route is None:
            return self._unrouted(request)
        if route.caller == VIEWER:
            return route.handler(self, request)
        nonce = self._verified(request)
        if nonce is None:
            return self._refusal(request)
        try:
            call = route.request.parse(_values(request)) if route.request is not None else None
            if route.method == "GET":
                return route.handler(self, request, call, nonce)
            answer = route.handler(self, call)
        except ValueError as exc:  # BadRequest, or a value the coordinator refuses
            return self._signed(400, {"error": f"bad request: {exc}"}, nonce)
        except RecursionError:  # a check that walks a deeply nested value (json's recurses per level)
            return self._signed(400, {"error": "bad request: the body is nested too deeply"}, nonce)
        if answer is None:
            return self._signed(404, {"error": "not found"}, nonce)
        return self._signed(200, answer, nonce)

    def _unrouted(self, request: Request) -> Response:
        if request.method not in ("GET", "POST") or request.path in PATHS:
            return _json(405, {"error": f"{request.method} is not allowed"})
        if request.method == "POST" and request.path.startswith("/v1/"):
            # an executor's call this AM does not know: a signed refusal, which the executor takes as final
            nonce = self._verified(request)
            return self._refusal(request) if nonce is None else self._signed(404, {"error": "not found"}, nonce)
        return _json(404, {"error": "not found"})

    # ---- the executor's calls answered at once: the answer's JSON, or None for 404 ---------------
    def _answer(self, call: wire.Call) -> dict | None:
        return self.coordinator.answer(call)

    def _heartbeat(self, call: wire.Heartbeat) -> dict | None:
        answer = self.coordinator.answer(call)
        offer = self.token_offer() if self.token_offer is not None else None
        return dict(answer, tokens=offer) if offer and isinstance(answer, dict) else answer

    # ---- what waits or is built in a thread: answered with a Response -----------------------------
    async def _status(self, request: Request, page: bool) -> Response:
        trusted, nonce = self._viewer(request)
        if not trusted:
            body = await self._public[page].get()
            return Response(200, body, "text/html; charset=utf-8" if page else "application/json")
        status = await self.http.in_thread(self.status_fn, trusted)
        if page:
            body = await self.http.in_thread(dashboard.render, status)
            return self._signed(200, body, nonce, content_type="text/html; charset=utf-8")
        if status.get("state") == "DONE" and nonce is not None:  # the client (signed) has the final table
            self.final_status_served.set()
        return self._signed(200, status, nonce)

    async def _spec(self, request: Request, call: wire.SpecPoll, nonce: tuple[str, int]) -> Response:
        answer = await self._wait_spec(call)
        if answer is None:
            return self._signed(204, None, nonce)
        gzipped = "gzip" in request.headers.get("accept-encoding", "")
        return self._signed(200, answer, nonce, gzipped=gzipped)

    def _public_body(self, page: bool) -> bytes:
        status = self.status_fn(False)
        return dashboard.render(status) if page else json.dumps(status).encode()

    def _job(self, request: Request, call: None, nonce: tuple[str, int]) -> Response:
        if self.job_files is None:
            return self._signed(404, {"error": "this AM serves no job files"}, nonce)
        return self._signed(200, self.job_files.job, nonce)

    async def _src_zip(self, request: Request, call: None, nonce: tuple[str, int]) -> Response:
        if self.job_files is None or self.job_files.src_zip is None:
            return self._signed(404, {"error": "this AM does not serve the src_dir"}, nonce)
        path, ready = self.job_files.src_zip, self.job_files.src_ready
        if self._src is None:  # a whole gang asks at once: one read, every request waits on it
            self._src = asyncio.ensure_future(self.http.in_thread(_size_and_digest, path, ready))
        try:
            size, digest = await asyncio.shield(self._src)
        except Exception as exc:  # noqa: BLE001 - HDFS retried already: final, not a 5xx that executors retry
            log.warning("cannot serve the src_dir archive: %s", exc)
            return self._signed(424, {"error": f"the AM cannot read the src_dir archive: {exc}"}, nonce)
        signature = self.verifier.sign_answer(nonce, 200, b"", digest)
        return Response(200, content_type="application/zip", headers=((RESPONSE_HEADER, signature),),
                        file=path, file_size=size)

    # ---- who asks --------------------------------------------------------------------------------
    def _verified(self, request: Request) -> tuple[str, int] | None:
        """The request's nonce if it is signed with the app secret for this AM and fresh, else None
        (and the reason kept for _refusal)."""
        try:
            nonce = self.verifier.check(request.method, request.target, request.body,
                                        request.headers.get(REQUEST_HEADER.lower()))
        except AuthError as exc:
            request.refused = exc
            return None
        request.vouch()  # its connection may stay open (httpd.py)
        return nonce

    def _refusal(self, request: Request) -> Response:
        """401: unsigned for strangers; signed, with the reason, for a sender of ours whose clock is
        off (SkewError), so its executor can say why instead of retrying."""
        if isinstance(request.refused, SkewError):
            return self._signed(401, {"error": str(request.refused)}, request.refused.nonce)
        return _json(401, {"error": "unsigned, wrongly signed or replayed request"})

    def _viewer(self, request: Request) -> tuple[bool, tuple[str, int] | None]:
        """(full detail?, the nonce to sign the answer for): a signed request (the client) or
        one relayed by YARN's web proxy sees everything; anyone else sees states only."""
        if request.headers.get(REQUEST_HEADER.lower()):
            nonce = self._verified(request)
            return nonce is not None, nonce
        if request.peer not in self.trusted_addresses:
            return False, None
        return self.proxy_viewer(report.proxy_user(request.headers.get("cookie"))), None

    def _signed(self, status: int, payload, nonce, content_type: str = "application/json",
                gzipped: bool = False) -> Response:
        digest, extra = None, ()
        if isinstance(payload, bytes):
            body = payload
        elif payload is None:
            body = b""
        elif isinstance(payload, SpecAnswer):  # (its bytes and their hash are mostly made once per view)
            body, digest = payload.wire(gzipped)
            extra = (("Content-Encoding", "gzip"),) if gzipped else ()
        else:
            body = json.dumps(payload).encode()
        headers = ((RESPONSE_HEADER, self.verifier.sign_answer(nonce, status, body, digest)),) \
            if nonce is not None else ()
        return Response(status, body, content_type, headers + extra)


def _size_and_digest(path: Path, ready: Callable[[], object] = lambda: None) -> tuple[int, str]:
    """What an answer sending the file is signed with (the file itself is sent by sendfile), once
    ready() says the file is there."""
    ready()
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        return f.tell(), digest


def _json(status: int, payload: dict) -> Response:
    return Response(status, json.dumps(payload).encode())


def _values(request: Request) -> dict:
    """What a route's request is parsed from: the JSON body of a POST, the query of a GET."""
    if request.method == "POST":
        return wire.decode(request.body)
    return {k: v[0] for k, v in parse_qs(request.query, strict_parsing=False).items()}


# ---- the route table ---------------------------------------------------------------------------------
EXECUTOR = "executor"  # signed with the app secret and fresh (an executor; the client too), else 401
VIEWER = "viewer"  # anyone: full detail if signed or relayed by YARN's web proxy, the public view otherwise


@dataclass(frozen=True)
class Route:
    """One route. Its handler is called as
    - VIEWER: handler(server, request) -> an awaitable Response;
    - EXECUTOR, GET: handler(server, request, the parsed request or None, nonce) -> a Response
      or an awaitable one (the spec long-poll waits on the loop);
    - EXECUTOR, POST: handler(server, the parsed request) -> the answer's JSON (signed 200), or
      None (signed 404: not a call this AM knows the task of)."""

    method: str
    path: str
    caller: str
    handler: Callable
    request: type[wire.Request] | None = None  # from the body (POST) or the query (GET), checked


def _call(request: type[wire.Request], handler: Callable) -> Route:
    return Route(request.METHOD, request.PATH, EXECUTOR, handler, request)


_ROUTES = (
    Route("GET", "/status.json", VIEWER, partial(AmHttpServer._status, page=False)),
    Route("GET", "/api/status", VIEWER, partial(AmHttpServer._status, page=False)),
    Route("GET", "/", VIEWER, partial(AmHttpServer._status, page=True)),
    Route("GET", "/index.html", VIEWER, partial(AmHttpServer._status, page=True)),
    Route("GET", "/v1/job", EXECUTOR, AmHttpServer._job),
    Route("GET", "/v1/src", EXECUTOR, AmHttpServer._src_zip),
    _call(wire.SpecPoll, AmHttpServer._spec),
    _call(wire.Register, AmHttpServer._answer),
    _call(wire.Started, AmHttpServer._answer),
    _call(wire.Heartbeat, AmHttpServer._heartbeat),
    _call(wire.Callback, AmHttpServer._answer),
    _call(wire.Tensorboard, AmHttpServer._answer),
    _call(wire.Result, AmHttpServer._answer),
)
ROUTES: dict[tuple[str, str], Route] = {(r.method, r.path): r for r in _ROUTES}
PATHS = frozenset(r.path for r in _ROUTES)
