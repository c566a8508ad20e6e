"""The executor's control endpoint: how a new AM attempt tells a running executor where it is.

A YARN AM attempt that dies leaves its task containers running (keep-containers); the next
attempt finds them, reads each executor's control address from the previous attempt's snapshot
and POSTs its own URL here (tony_py/net/wire.py: AmMoved). The executor switches its channel and
carries on: the user process is not disturbed. Bound to the NodeManager host's address (not a
wildcard); only requests signed with the application's secret, and fresh, are obeyed
(tony_py/auth.py), and the answer is signed for the request. Nobody else has business here, and
anyone on the network can connect, so the server (the AM's own, tony_py/net/httpd.py) is made
with:

- one request per connection, which must arrive whole within REQUEST_S of the connect (one
  deadline for the whole request: a byte every few seconds cannot hold a slot for ever); a late
  one is closed without an answer;
- at most MAX_CONNECTIONS at once; the last slot is kept for a signed request
  (tony_py/net/admission.py: LastSlot): a newcomer displaces whoever holds it without having
  proved itself yet, so silent or trickling sockets cannot keep the AM's notification out (it is
  sent once, at fail-over), and a signed request, once checked, is not displaced.

The socket is bound at once (the executor registers its port); the server is made and run in a
thread of its own, START_AFTER_S later. Importing it (asyncio) costs about 10 ms of CPU: on the
executor's way to registering it made a 4-task local job's user processes start ~35 ms later on
a 2-core machine (bench/local_startup.py), and even in a thread of its own, at once, it took the
GIL from the executor's start-up. Nothing can be lost by waiting: a new AM attempt learns the
port from a registration, and a request that comes before the server runs waits in the kernel's
accept queue (the AM waits 5 s for its answer: tony_py/am/main.py, notify_executors).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from typing import TYPE_CHECKING

from tony_py.auth import REQUEST_HEADER, RESPONSE_HEADER, AuthError, Verifier
from tony_py.net.httpmsg import Request, Response
from tony_py.net.wire import AmMoved, BadRequest, decode

if TYPE_CHECKING:
    from tony_py.net.httpd import HttpServer

log = logging.getLogger("tony.executor.control")

MAX_BODY = 4096
MAX_CONNECTIONS = 8
REQUEST_S = 5.0  # from connect to the last byte of the body
START_AFTER_S = 1.0  # the executor's: the server starts once the task's start-up is over


class ControlServer:
    def __init__(self, host: str, verifier: Verifier, channel, start_after_s: float = 0.0):
        self.channel = channel
        self.verifier = verifier
        sock = socket.create_server((socket.gethostbyname(host), 0), backlog=128)
        self.address, self.port = sock.getsockname()[:2]
        verifier.receiver = f"{host}:{self.port}"  # the AM addresses it by the node's name (its control_url)
        self._httpd: HttpServer | None = None
        self._made = threading.Event()
        thread = threading.Timer(start_after_s, self._serve, args=(sock,))
        thread.name, thread.daemon = "executor-control", True
        thread.start()

    def _serve(self, sock: socket.socket) -> None:
        try:
            from tony_py.net.admission import LastSlot
            from tony_py.net.httpd import HttpServer

            self._httpd = HttpServer(sock, self._handle, max_connections=MAX_CONNECTIONS, request_timeout_s=REQUEST_S,
                                     idle_timeout_s=REQUEST_S, max_body=MAX_BODY, threads=1,
                                     slots=LastSlot(MAX_CONNECTIONS), keep_alive=False, answer_late=False,
                                     name="executor-control")
        except Exception:  # noqa: BLE001 - the task runs on; only an AM fail-over would need this
            log.exception("the control endpoint did not start: a new AM attempt cannot reach this executor")
            sock.close()
            return
        self._made.set()
        self._httpd.serve_forever()

    @property
    def httpd(self) -> HttpServer:
        """The server, once its thread has made it."""
        if not self._made.wait(30):
            raise RuntimeError("the control endpoint's server did not start")
        return self._httpd

    def switch_am(self, url: str) -> None:
        log.info("the AM moved: %s -> %s", self.channel.base_url, url)
        self.channel.base_url = url.rstrip("/")

    def _handle(self, request: Request) -> Response:
        try:
            nonce = self.verifier.check(request.method, request.target, request.body,
                                        request.headers.get(REQUEST_HEADER.lower()))
        except AuthError as exc:
            return Response(401, json.dumps({"error": str(exc)}).encode())
        request.vouch()  # its slot is safe now (LastSlot)
        if request.path != AmMoved.PATH:
            return self._signed(404, {"error": "not found"}, nonce)
        if request.method != AmMoved.METHOD:
            return self._signed(405, {"error": f"{request.method} is not allowed"}, nonce)
        try:
            moved = AmMoved.parse(decode(request.body))
        except BadRequest as exc:
            return self._signed(400, {"error": f"bad request: {exc}"}, nonce)
        self.switch_am(moved.url)
        return self._signed(200, {"ok": True}, nonce)

    def _signed(self, status: int, payload: dict, nonce: tuple[str, int]) -> Response:
        body = json.dumps(payload).encode()
        return Response(status, body, headers=((RESPONSE_HEADER, self.verifier.sign_answer(nonce, status, body)),))
