"""The executor's control endpoint: how a new AM attempt tells a running executor where it is.

A YARN AM attempt that dies leaves its task containers running (keep-containers); the next
attempt finds them, reads each executor's control address from the previous attempt's snapshot
and POSTs its own URL here. The executor switches its channel and carries on: the user
process is not disturbed. Bound to the NodeManager host's address (not a wildcard); only
requests signed with the application's secret, and fresh, are obeyed (tony_py/auth.py), and
the answer is signed for the request. Nobody else has business here, and anyone on the
network can connect, so:

- one request per connection, which must arrive whole within REQUEST_S of the connect (an
  absolute deadline: a per-read timeout let a byte every few seconds hold a thread for ever);
- at most MAX_CONNECTIONS at once; the last slot is kept for a signed request: a newcomer
  displaces whoever holds it without having proved itself yet, so silent or trickling sockets
  cannot keep the AM's notification out (it is sent once, at fail-over).
"""

from __future__ import annotations

import io
import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tony_py.auth import REQUEST_HEADER, RESPONSE_HEADER, AuthError, Verifier

log = logging.getLogger("tony.executor.control")

MAX_BODY = 4096
MAX_CONNECTIONS = 8
REQUEST_S = 5.0  # from connect to the last byte of the body


class _Deadline(io.RawIOBase):
    """Reads from a socket against one deadline for the whole request."""

    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self.sock.settimeout(left)
        return self.sock.recv_into(buffer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler):
        self.lock = threading.Lock()
        self.shared: set[socket.socket] = set()  # MAX_CONNECTIONS - 1 slots for anyone
        self.kept: socket.socket | None = None  # the last one: a signed request keeps it
        self.proven: set[socket.socket] = set()
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self._take_slot(request):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._free_slot(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._free_slot(request)

    def _take_slot(self, request: socket.socket) -> bool:
        with self.lock:
            if len(self.shared) < MAX_CONNECTIONS - 1:
                self.shared.add(request)
                return True
            if self.kept in self.proven:
                return False  # a signed request is being answered (for milliseconds)
            if self.kept is not None:
                try:  # it has not proved itself: it gives way (its thread then ends)
                    self.kept.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.kept = request
            return True

    def _free_slot(self, request: socket.socket) -> None:
        with self.lock:
            self.shared.discard(request)
            self.proven.discard(request)
            if self.kept is request:
                self.kept = None

    def prove(self, request: socket.socket) -> None:
        with self.lock:
            self.proven.add(request)

    def handle_error(self, request, client_address):
        # (socketserver prints a traceback to stderr, which is executor.log: not for a stranger's socket)
        log.debug("control request from %s failed", client_address[0], exc_info=True)


class ControlServer:
    def __init__(self, host: str, verifier: Verifier, channel):
        self.channel = channel
        self.verifier = verifier
        self.httpd = _Server((socket.gethostbyname(host), 0), _handler(self))
        self.address, self.port = self.httpd.server_address[:2]
        verifier.receiver = f"{host}:{self.port}"  # the AM addresses it by the node's name (its control_url)
        threading.Thread(target=self.httpd.serve_forever, name="executor-control", daemon=True).start()

    def switch_am(self, url: str) -> None:
        log.info("the AM moved: %s -> %s", self.channel.base_url, url)
        self.channel.base_url = url.rstrip("/")


def _handler(server: ControlServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def setup(self):
            super().setup()
            self.rfile.close()  # replaced: one deadline for the whole request, not one per read
            self.rfile = io.BufferedReader(_Deadline(self.connection, time.monotonic() + REQUEST_S))

        def log_message(self, fmt, *args):
            log.debug(fmt, *args)

        def _reply(self, code: int, payload: dict, nonce=None) -> None:
            body = json.dumps(payload).encode()
            self.connection.settimeout(REQUEST_S)  # (what was left of the request's time)
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")  # one request per connection
            if nonce is not None:
                self.send_header(RESPONSE_HEADER, server.verifier.sign_answer(nonce, code, body))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            try:
                length = int(self.headers.get("Content-Length", ""))
                if not 0 <= length <= MAX_BODY:
                    raise ValueError(length)
            except ValueError:
                return self._reply(400, {"error": f"Content-Length must be 0..{MAX_BODY}"})
            body = self.rfile.read(length)
            try:
                nonce = server.verifier.check("POST", self.path, body, self.headers.get(REQUEST_HEADER))
            except AuthError as exc:
                return self._reply(401, {"error": str(exc)})
            self.server.prove(self.request)
            if self.path != "/v1/am":
                return self._reply(404, {"error": "not found"}, nonce)
            try:
                url = json.loads(body)["url"]
                if not isinstance(url, str) or not url.startswith("http://") or len(url) > 300:
                    raise ValueError(url)
            except (ValueError, KeyError, TypeError) as exc:
                return self._reply(400, {"error": f"bad request: {exc}"}, nonce)
            except RecursionError:  # json's parser recurses once per level of nesting
                return self._reply(400, {"error": "bad request: nested too deeply"}, nonce)
            server.switch_am(url)
            return self._reply(200, {"ok": True}, nonce)

    return Handler
