"""The executor's control endpoint: how a new AM attempt tells a running executor where it is.

A YARN AM attempt that dies leaves its task containers running (keep-containers); the next
attempt finds them, reads each executor's control address from the previous attempt's snapshot
and POSTs its own URL here. The executor switches its channel and carries on: the user
process is not disturbed. Bound to the NodeManager host's address (not a wildcard); only
requests signed with the application's secret, and fresh, are obeyed (tony_py/auth.py), and
the answer is signed for the request. Few connections, short reads: nobody else has business
here.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tony_py.auth import REQUEST_HEADER, RESPONSE_HEADER, AuthError, Verifier

log = logging.getLogger("tony.executor.control")

MAX_BODY = 4096
MAX_CONNECTIONS = 8


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler):
        self.slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, handler)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class ControlServer:
    def __init__(self, host: str, verifier: Verifier, channel):
        self.channel = channel
        self.verifier = verifier
        self.httpd = _Server((socket.gethostbyname(host), 0), _handler(self))
        self.address, self.port = self.httpd.server_address[:2]
        threading.Thread(target=self.httpd.serve_forever, name="executor-control", daemon=True).start()

    def switch_am(self, url: str) -> None:
        log.info("the AM moved: %s -> %s", self.channel.base_url, url)
        self.channel.base_url = url.rstrip("/")


def _handler(server: ControlServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 5  # a slow or silent client cannot hold a thread

        def log_message(self, fmt, *args):
            log.debug(fmt, *args)

        def _reply(self, code: int, payload: dict, nonce=None) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
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
            if self.path != "/v1/am":
                return self._reply(404, {"error": "not found"}, nonce)
            try:
                url = json.loads(body)["url"]
                if not isinstance(url, str) or not url.startswith("http://") or len(url) > 300:
                    raise ValueError(url)
            except (ValueError, KeyError, TypeError) as exc:
                return self._reply(400, {"error": f"bad request: {exc}"}, nonce)
            server.switch_am(url)
            return self._reply(200, {"ok": True}, nonce)

    return Handler
