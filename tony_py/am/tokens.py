"""New delegation tokens for running executors, over TLS.

With the submitter's keytab the AM's JVM gets a new set of tokens at 75 % of their renewal
interval (jvm/.../TokenRenewal.java); containers it starts afterwards hold them from their
start. A running executor learns of a new set from its heartbeat's answer (signed with the
application's secret: a version, this listener's address and its certificate's SHA-256) and
fetches it with a signed GET /v1/tokens from this listener, whose certificate it pins to that
digest (tony_py/executor/tokens.py). Tokens are secrets: they never cross the plain executor
channel, which is signed but not encrypted.

The listener binds the node's address, serves one request per connection, at most MAX_CLIENTS at
once, and gives each connection DEADLINE_S for its handshake and request.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import socketserver
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tony_py.auth import REQUEST_HEADER, RESPONSE_HEADER, AuthError, Verifier

log = logging.getLogger("tony.am.tokens")

PATH = "/v1/tokens"
MAX_CLIENTS = 16
DEADLINE_S = 10.0


class TokenServer(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, bind_ip: str, host: str, secret: str, tokens, material: dict):
        super().__init__((bind_ip, 0), _Handler)
        self.tokens = tokens  # () -> (version, base64 of the token file's bytes)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.minimum_version = ssl.TLSVersion.TLSv1_2
        self.tls.load_cert_chain(material["cert"], material["key"])
        self.sha256 = material["sha256"]
        self.port = self.server_address[1]
        self.url = f"https://{host}:{self.port}"
        self.verifier = Verifier(secret, receiver=f"{host}:{self.port}")
        self._slots = threading.BoundedSemaphore(MAX_CLIENTS)

    def process_request(self, request, client_address):
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)  # busy: a real executor asks again at its next heartbeat
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

    def handle_error(self, request, client_address):
        log.debug("token request from %s failed", client_address, exc_info=True)

    def offer(self) -> dict | None:
        """What a heartbeat's answer carries once the tokens were renewed (None before)."""
        version, _ = self.tokens()
        return {"version": version, "url": self.url, "sha256": self.sha256} if version else None


class _Handler(BaseHTTPRequestHandler):
    server: TokenServer
    protocol_version = "HTTP/1.1"

    def setup(self):
        self.request.settimeout(DEADLINE_S)
        self.request = self.server.tls.wrap_socket(self.request, server_side=True)
        super().setup()

    def log_message(self, fmt, *args):
        log.debug("token request: " + fmt, *args)

    def do_GET(self):
        if self.path != PATH:
            return self._reply(404, {"error": "not found"})
        try:
            nonce = self.server.verifier.check("GET", self.path, b"", self.headers.get(REQUEST_HEADER))
        except AuthError as exc:
            return self._reply(401, {"error": str(exc)})
        version, tokens = self.server.tokens()
        self._reply(200, {"version": version, "tokens": tokens}, nonce)

    def _reply(self, status: int, payload: dict, nonce=None) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        if nonce is not None:
            self.send_header(RESPONSE_HEADER, self.server.verifier.sign_answer(nonce, status, body))
        self.end_headers()
        self.wfile.write(body)
        self.close_connection = True


LISTEN_AFTER_S = 10.0  # as the JVM's first renewal (TokenRenewal.PROBE_AFTER_MS): after the tasks' start
LISTEN_TRIES = 3


class TokenService:
    """The renewal's listener, made off the AM's start-up path and after the tasks' start: its
    key comes from keytool (a JVM of its own, 0.9 s of CPU), and executors need it only at the
    first renewal, 75 % of the tokens' renewal interval later. Heartbeat answers carry no offer
    until it listens."""

    def __init__(self):
        self.server: TokenServer | None = None

    def offer(self) -> dict | None:
        return self.server.offer() if self.server else None


def start(bridge, secret: str, host: str, bind_ip: str, workdir: Path, attempt: int) -> TokenService | None:
    """Renew the job's tokens and serve them, where the AM holds the submitter's keytab; None
    without one (the job then runs on the tokens it was submitted with). A later AM attempt
    gets a new set before this returns: it may have been started with tokens past their max
    lifetime, and nothing of this attempt may touch HDFS with those."""
    encoded = os.environ.get("TONY_TOKEN_FILE_SYSTEMS")  # base64 of {"file_systems": [...]}, from the client
    file_systems = base64.b64decode(encoded).decode() if encoded else json.dumps({"file_systems": []})
    if not bridge.startTokenRenewal(file_systems, attempt > 1):
        return None
    service = TokenService()

    def listen() -> None:
        # A later attempt listens at once: the executors it adopts hold the last attempt's set,
        # which may have a quarter of the renewal interval left.
        time.sleep(LISTEN_AFTER_S if attempt == 1 else 0)
        for tries_left in range(LISTEN_TRIES - 1, -1, -1):
            try:
                material = json.loads(bridge.tlsMaterial(str(workdir)))
                server = TokenServer(bind_ip, host, secret,
                                     lambda: (bridge.tokensVersion(), bridge.taskTokensBase64()), material)
                break
            except Exception:  # noqa: BLE001 - keytool, the key files, the bind: said, then tried again
                log.exception("the listener for renewed tokens could not start (%d more tries, %.0f s apart)",
                              tries_left, LISTEN_AFTER_S)
                if not tries_left:
                    log.error("running tasks keep the tokens they have; tasks started later get new ones")
                    return
                time.sleep(LISTEN_AFTER_S)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="am-tokens",
                         daemon=True).start()
        service.server = server
        log.info("renewing the job's delegation tokens with the submitter's keytab; executors fetch them from %s",
                 server.url)

    threading.Thread(target=listen, name="am-tokens-tls", daemon=True).start()
    return service
