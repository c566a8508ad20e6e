"""The executor's control endpoint: how a new AM attempt tells a running executor where it is.

A YARN AM attempt that dies leaves its task containers running (keep-containers); the next
attempt finds them, reads each executor's control address from the previous attempt's snapshot
and POSTs its own URL here. The executor switches its channel and carries on: the user
process is not disturbed. Bound to the NodeManager host's address (not a wildcard), and only
requests carrying the application's secret are obeyed.
"""

from __future__ import annotations

import hmac
import json
import logging
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

log = logging.getLogger("tony.executor.control")


class ControlServer:
    def __init__(self, host: str, secret: str, channel):
        self.channel = channel
        self.secret = secret.encode()
        handler = _handler(self)
        self.httpd = ThreadingHTTPServer((socket.gethostbyname(host), 0), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, name="executor-control", daemon=True).start()

    def switch_am(self, url: str) -> None:
        log.info("the AM moved: %s -> %s", self.channel.base_url, url)
        self.channel.base_url = url.rstrip("/")


def _handler(server: ControlServer):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = 10  # a slow or silent client cannot hold a thread

        def log_message(self, fmt, *args):
            log.debug(fmt, *args)

        def _reply(self, code: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self):
            header = self.headers.get("Authorization", "")
            token = header[7:].encode() if header.startswith("Bearer ") else b""
            if not hmac.compare_digest(token, server.secret):
                return self._reply(401, {"error": "missing or wrong application secret"})
            if self.path != "/v1/am":
                return self._reply(404, {"error": "not found"})
            try:
                length = int(self.headers.get("Content-Length") or 0)
                url = json.loads(self.rfile.read(length))["url"]
                if not str(url).startswith("http://"):
                    raise ValueError(url)
            except (ValueError, KeyError, TypeError) as exc:
                return self._reply(400, {"error": f"bad request: {exc}"})
            server.switch_am(url)
            return self._reply(200, {"ok": True})

    return Handler
