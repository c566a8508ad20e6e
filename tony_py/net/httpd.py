"""A small HTTP/1.1 server on one asyncio event loop: the transport under the AM's API
(tony_py/am/http/server.py) and an executor's control endpoint (tony_py/executor/control.py).

Why not the standard library's ThreadingHTTPServer (what the AM used first): a thread and a
connection per request cost the AM 0.9 ms of CPU per heartbeat, 18 % of a core at 200
executors (bench/scale.py), and every long-poll held a thread. Why not h11, the sans-I/O HTTP
library: parsing alone took 54 µs and writing an answer 40 µs per request in pure Python,
most of the whole budget (2,000 heartbeats a second in a quarter of a core is 125 µs each for
everything). This module speaks only what the AM's clients send (the executors'
http.client, the client's urllib and requests, browsers behind YARN's proxy):

- a request line and at most MAX_HEADERS header fields in at most MAX_HEAD bytes;
- a body by Content-Length only, at most max_body bytes (Transfer-Encoding is refused with
  501, a POST without a length with 411, a bad or repeated length with 400);
- keep-alive only for requests that proved who sent them (the handler calls `request.vouch()`:
  a valid signature): HTTP/1.1 connections then stay open between requests (`Connection:
  close` and HTTP/1.0 close them), one request at a time per connection (what arrives
  meanwhile waits in the buffer, at most one more request's worth); any other answer closes
  its connection, so a stranger gets one answer per connection; a server made with
  keep_alive=False (the control endpoint) answers one request per connection, signed or not;
- back-pressure: when a client does not read its answers, above WRITE_HIGH bytes held for it
  the connection stops reading and parsing until the client has taken them (dropped if it
  takes nothing for idle_timeout_s; a closing one, after request_timeout_s);
- deadlines: a started request must arrive whole within request_timeout_s (a connection's first
  request counts from the connect), and an idle connection is closed after idle_timeout_s; one
  that overran gets 408 (or, with answer_late=False, is just closed);
- a connection cap that silent sockets cannot fill: unproven connections (no signed request
  yet) have a share of max_connections and a per-address limit, a newcomer displaces the
  oldest silent one, and the rest of the slots are kept by proven connections
  (tony_py/net/admission.py; the control endpoint's policy is another there); a connection that
  finds no slot gets 503 and is closed.

Anything else gets a 4xx/5xx answer and the connection is closed. Handlers run on the loop and
answer at once or return an awaitable; blocking work goes through `in_thread`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Awaitable, Callable

from tony_py.net import admission
from tony_py.net.httpmsg import (MAX_HEAD, Handler, HttpError, Request, Response, body_length, error_response,
                                parse_head, render)

log = logging.getLogger("tony.httpd")

LINGER_S = 1.0
SWEEP_S = 0.25
# What the AM holds for one client that does not read (asyncio's default too, said out loud): a
# connection that pipelines requests and reads nothing costs at most this plus one answer.
WRITE_HIGH = 64 * 1024


class HttpServer:
    def __init__(self, address: tuple[str, int] | socket.socket, handler: Handler, max_connections: int = 256,
                 request_timeout_s: float = 5.0, idle_timeout_s: float = 120.0, max_body: int = 1 << 20,
                 threads: int = 4, slots: admission.Slots | None = None, keep_alive: bool = True,
                 answer_late: bool = True, name: str = "am-http"):
        self.handler = handler
        self.keep_alive = keep_alive  # False: one request per connection, signed or not
        self.answer_late = answer_late  # a request that did not arrive in time: 408 (else just closed)
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.max_body = max_body
        # the kernel's accept queue absorbs a whole gang connecting at once (no SYN retries); or a
        # socket bound already (the control endpoint's: its port is needed before this is imported)
        self.backlog = max(128, min(max_connections, 4096))
        self.sock = address if isinstance(address, socket.socket) else socket.create_server(address,
                                                                                            backlog=self.backlog)
        self.sock.setblocking(False)
        self.loop = asyncio.new_event_loop()
        self.connections: set[_Connection] = set()  # every open one, slot or not (the sweep's)
        self.admission = slots or admission.Admission(max_connections, own_address=self.sock.getsockname()[0])
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix=name)
        self._serving = threading.Event()
        self._stopped = threading.Event()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def serve_forever(self) -> None:
        asyncio.set_event_loop(self.loop)
        # asyncio listens again with its own backlog (100 unless told): the queue is this one
        server = self.loop.run_until_complete(self.loop.create_server(lambda: _Connection(self), sock=self.sock,
                                                                      backlog=self.backlog))
        self.loop.call_soon(self._sweep)
        self._serving.set()
        try:
            self.loop.run_forever()
        finally:
            for conn in list(self.connections):
                conn.abort()
            server.close()
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.close()
            self._pool.shutdown(wait=False)
            self._stopped.set()

    def _sweep(self) -> None:
        """Every SWEEP_S: close what overran its deadline (a request that did not arrive in
        time, an idle keep-alive connection, a lingering close)."""
        now = self.loop.time()
        for conn in [c for c in self.connections if c.deadline is not None and c.deadline <= now]:
            conn.expire(now)
        self.loop.call_later(SWEEP_S, self._sweep)

    def shutdown(self) -> None:
        """Stop serving (from another thread) and wait until the loop has ended."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self._serving.is_set():
            self._stopped.wait(5)

    def server_close(self) -> None:
        self.sock.close()

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run fn on the loop, from any thread."""
        try:
            self.loop.call_soon_threadsafe(fn)
        except RuntimeError:
            pass  # the loop is closed: the server is gone, nobody waits

    async def in_thread(self, fn, *args):
        return await self.loop.run_in_executor(self._pool, fn, *args)


class Recent:
    """A value built in the server's threads at most once every max_age_s: every caller
    meanwhile awaits (or reuses) the same build, however many there are. A failed build is
    tried again by the next caller."""

    def __init__(self, server: HttpServer, build: Callable[[], object], max_age_s: float):
        self.server, self.build, self.max_age_s = server, build, max_age_s
        self._built: tuple[float, asyncio.Future] | None = None

    async def get(self):
        now = self.server.loop.time()
        built = self._built
        failed = built is not None and built[1].done() and (built[1].cancelled() or built[1].exception())
        if built is None or now - built[0] > self.max_age_s or failed:
            built = self._built = (now, asyncio.ensure_future(self.server.in_thread(self.build)))
        return await asyncio.shield(built[1])


class _Connection(asyncio.Protocol):
    """One client connection. Deadlines are a timestamp each, checked by the server's sweep
    (a timer per request would cost more than the rest of a heartbeat's handling)."""

    def __init__(self, server: HttpServer):
        self.server = server
        self.loop = server.loop
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.peer = ""
        self.busy = False
        self.task: asyncio.Task | None = None
        self.deadline: float | None = None
        self.closing = False  # answered and half-closed: lingering until the deadline
        self.vouched = False  # the request being answered proved who sent it
        self.idle = False  # between requests: the next one's deadline starts with its first byte
        self.opened = 0.0
        self.write_paused = False  # the client is not taking its answers

    # ---- asyncio callbacks -------------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.set_write_buffer_limits(high=WRITE_HIGH)
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if peer else ""
        self.opened = self.loop.time()
        self.server.connections.add(self)
        if not self.server.admission.admit(self, self.opened):
            transport.write(render(Response(503), keep_alive=False))
            self._linger()
            return
        self.deadline = self.loop.time() + self.server.request_timeout_s

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return  # discarded: the answer is out, the connection is ending
        if self.idle and not self.busy:  # a request has started: it must arrive whole in time
            self.idle = False
            self.deadline = self.loop.time() + self.server.request_timeout_s
        self.buffer += data
        if not self.busy and not self.write_paused:
            self._next()
        elif len(self.buffer) > MAX_HEAD + self.server.max_body:
            # more than one more request while one is answered: not a client of ours (no
            # pausing the socket instead: two epoll changes per request cost more than this check)
            self._refuse(400, "too much data sent ahead of the answer")

    def connection_lost(self, exc) -> None:
        self.server.connections.discard(self)
        self.server.admission.release(self)
        self.deadline = None
        if self.task is not None and not self.task.done():
            self.task.cancel()  # a long-poll for a client that is gone

    def pause_writing(self) -> None:
        """More than WRITE_HIGH bytes wait for the client: read and parse nothing more."""
        self.write_paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.closing:
            return
        self.transport.resume_reading()
        if not self.busy:
            self._between_requests()

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    # ---- its slot (tony_py/net/admission.py) ---------------------------------------------------------
    def displaceable(self, now: float, grace_s: float) -> bool:
        """Unproven, and answered already or silent past its grace: a newcomer may have its slot."""
        return self.closing or (not self.busy and now - self.opened >= grace_s)

    def displace(self) -> None:
        self.transport.abort()

    def expire(self, now: float) -> None:
        """Called by the sweep once `deadline` passed."""
        self.deadline = None
        if self.transport is None or self.transport.is_closing():
            return
        if self.write_paused or self.transport.get_write_buffer_size():
            self.transport.abort()  # answers the client did not take in time: drop them
        elif self.closing or not self.buffer:
            self.transport.close()  # lingered long enough, or idle: nothing to answer
        elif not self.busy and self.server.answer_late:
            self._refuse(408, "the request did not arrive in time")
        elif not self.busy:
            self.transport.abort()  # a stranger's trickle: nothing to tell it

    # ---- requests ------------------------------------------------------------------------------
    def _next(self) -> None:
        if self.busy or self.closing or self.write_paused or self.transport.is_closing():
            return  # (a call scheduled by _between_requests, for a connection that changed meanwhile)
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > MAX_HEAD:
                self._refuse(431, f"the request head is larger than {MAX_HEAD} bytes")
            return
        try:
            method, target, version, headers = parse_head(bytes(self.buffer[:end]))
            length = body_length(method, headers, self.server.max_body)
        except HttpError as exc:
            self._refuse(exc.status, str(exc))
            return
        total = end + 4 + length
        if len(self.buffer) < total:
            return  # the rest of the body is on its way (the request deadline runs)
        body = bytes(self.buffer[end + 4:total])
        del self.buffer[:total]
        keep_alive = version == "HTTP/1.1" and "close" not in headers.get("connection", "").lower()
        self.busy = True
        self.vouched = False
        self.deadline = None  # the handler takes the time it needs (a long-poll waits up to 30 s)
        request = Request(method, target, headers, body, self.peer, self._vouch)
        try:
            answer = self.server.handler(request)
        except Exception:  # noqa: BLE001 - a handler's bug is a 500, not a dead server
            log.exception("error answering %s %s", request.method, request.path)
            self._write(error_response(500, "internal error"), keep_alive=False)
            return
        if isinstance(answer, Response):
            self._write(answer, keep_alive)  # most requests: answered at once, no task
        else:
            self.task = self.loop.create_task(self._await(answer, request, keep_alive))

    async def _await(self, answer: Awaitable[Response], request: Request, keep_alive: bool) -> None:
        try:
            response = await answer
        except asyncio.CancelledError:
            raise
        except Exception:  # noqa: BLE001
            log.exception("error answering %s %s", request.method, request.path)
            response, keep_alive = error_response(500, "internal error"), False
        self.task = None
        self._write(response, keep_alive)

    def _vouch(self) -> None:
        self.vouched = True
        self.server.admission.prove(self)

    def _write(self, response: Response, keep_alive: bool) -> None:
        if self.transport.is_closing():
            return
        keep_alive = keep_alive and self.vouched and self.server.keep_alive  # a stranger: one answer per connection
        self.transport.write(render(response, keep_alive))
        if response.file is not None:
            self.task = self.loop.create_task(self._send_file(response.file, keep_alive))
            return
        self._written(keep_alive)

    async def _send_file(self, path: Path, keep_alive: bool) -> None:
        try:
            with open(path, "rb") as f:
                await self.loop.sendfile(self.transport, f)
        except (OSError, RuntimeError) as exc:  # the client went away (or the file did): no framing left
            log.warning("sending %s failed: %s", path.name, exc)
            self.transport.abort()
            return
        self.task = None
        if not self.transport.is_closing():
            self._written(keep_alive)

    def _written(self, keep_alive: bool) -> None:
        """The answer is out: close, or take the next request."""
        if not keep_alive:
            self._linger()
            return
        self.busy = False
        self._between_requests()

    def _between_requests(self) -> None:
        """Take the next request the client sent ahead, or wait for one, or for the client to
        take its answers (a large status over a slow link: the idle timeout, not the request's)."""
        if self.buffer and not self.write_paused:
            self.deadline = self.loop.time() + self.server.request_timeout_s
            self.loop.call_soon(self._next)  # not from here: a pipelined run would be a stack of calls
        else:
            self.idle = not self.buffer
            self.deadline = self.loop.time() + self.server.idle_timeout_s

    def _refuse(self, status: int, message: str) -> None:
        """Answer a request the server cannot take, and close: what follows cannot be framed."""
        self.transport.write(render(error_response(status, message), keep_alive=False))
        self._linger()

    def _linger(self) -> None:
        """Close after the answer, without resetting the connection: closing a socket with
        unread input makes the kernel send a reset, which can destroy the answer before the
        client reads it. So: end our side, discard what still comes, close a moment later."""
        self.closing = True
        self.buffer.clear()
        if self.transport.can_write_eof():
            self.transport.write_eof()
        # an answer larger than the socket takes at once: the request deadline to collect it
        unsent = self.transport.get_write_buffer_size()
        self.deadline = self.loop.time() + (self.server.request_timeout_s if unsent else LINGER_S)
