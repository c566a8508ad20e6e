"""New delegation tokens for running executors, over TLS.

With the submitter's keytab the AM's JVM gets new sets of tokens (jvm/.../TokenRenewal.java)
when this module says they are due (next_set_in_s: from the tokens' own dates); containers it
starts afterwards hold them from their start. A running executor learns of a new set from its
heartbeat's answer (signed with the
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


# When a new set is due (next_set_in_s), a pure rule of the tokens' dates:
RENEW_AT = 0.5  # of the time from now until the first token of the set in hand may die
START_WAIT_S = 10.0  # the first attempt's probe and listener wait out the job's start, unless a set is due sooner
RETRY_S = 10.0  # a failed try for a new set, the probe or the listener is tried again this much later
MIN_GAP_S = 5.0  # between two sets: a clock ahead of the NameNode's by an interval would ask without end
# hdfs-native (a task's hdfs:// URLs) ignores a token whose max date is less than 60 s away
# (rust/src/security/user.rs) and falls back to Kerberos, which a container has no ticket for
CLIENT_MARGIN_MS = 60_000
LISTEN_TRIES = 3


def certain_until_ms(tokens: list[dict], interval_ms: int) -> int | None:
    """When the first of the tokens in hand may die, on the NameNode's clock (None: no tokens).

    Each is counted alive until its first renew-expiry, its issue date plus the renewal
    interval, and never past its max date less CLIENT_MARGIN_MS (from then on a task's hdfs://
    client no longer uses it): no renewal of it is counted on. The RM renews the
    submitted tokens, but stops before their max date (YARN-2704: once less than
    valid-time-remaining is left, with yarn.resourcemanager.proxy-user-privileges.enabled), and
    nobody renews the sets the AM asks for (their renewer is the RM, which never sees them)."""
    if not tokens:
        return None
    return min(min(t["issued_ms"] + interval_ms, t["max_ms"] - CLIENT_MARGIN_MS) for t in tokens)


def next_set_in_s(now_ms: int, interval_ms: int, tokens: list[dict]) -> float:
    """Seconds until a new set is due: RENEW_AT of the time the set in hand is certain to live
    (certain_until_ms), at once where that is past; RENEW_AT of the interval where no token of
    the replaced services is held. The tokens' dates set it, not the AM's start: an AM that
    starts late, its submitted tokens already old, gets a set at once. A fresh set (issued now)
    is replaced half an interval later, leaving the other half to reach the executors, to retry
    a failed try, and to bridge an AM attempt's end and the next one's first set.

    Issue dates are the NameNode's clock, now the AM's: Kerberos keeps them within minutes."""
    until = certain_until_ms(tokens, interval_ms)
    left_ms = interval_ms if until is None else until - now_ms
    return max(0.0, RENEW_AT * left_ms / 1000)


def start_wait_s(now_ms: int, configured_interval_ms: int, tokens: list[dict], attempt: int) -> float:
    """How long the probe and the listener wait after the AM's start: START_WAIT_S on the first
    attempt (off its registration and the tasks' start), less where a set is due sooner by the
    configured interval (the probe has not answered yet); none on a later attempt, which got a
    set before it registered and adopts executors holding the last attempt's."""
    if attempt > 1:
        return 0.0
    return min(START_WAIT_S, next_set_in_s(now_ms, configured_interval_ms, tokens))


def _now_ms() -> int:
    return int(time.time() * 1000)


def _held(bridge) -> list[dict]:
    return json.loads(bridge.heldTokens())


def _describe(tokens: list[dict], now_ms: int) -> str:
    return "; ".join(f"{t['kind']} {t['service']} issued {(now_ms - t['issued_ms']) / 1000:.0f} s ago, "
                     f"max date in {(t['max_ms'] - now_ms) / 1000:.0f} s" for t in tokens) or "none"


class TokenService:
    """The renewal and its listener, made off the AM's start-up path and after the tasks' start
    (start_wait_s): the probe asks the NameNode, and the listener's key comes from keytool (a JVM
    of its own, 0.9 s of CPU). Heartbeat answers carry no offer until it listens."""

    def __init__(self):
        self.server: TokenServer | None = None

    def offer(self) -> dict | None:
        return self.server.offer() if self.server else None


def _renew(bridge, attempt: int, start_listening) -> None:
    """The renewal thread: wait out the start, start the listener, learn the interval, then a
    new set whenever next_set_in_s says (a failed try again RETRY_S later), as long as the AM runs."""
    try:
        wait = start_wait_s(_now_ms(), bridge.tokenRenewalIntervalMs(False), _held(bridge), attempt)
    except Exception:  # noqa: BLE001 - the dates could not be read: the usual wait, the rule then
        log.exception("could not read the delegation tokens' dates")
        wait = 0.0 if attempt > 1 else START_WAIT_S
    time.sleep(wait)
    start_listening()
    interval_ms, renewed = None, False
    while True:
        try:
            if interval_ms is None:
                interval_ms = bridge.tokenRenewalIntervalMs(True)
                log.info("delegation tokens: renewal interval %.0f s", interval_ms / 1000)
            try:
                held = _held(bridge)
            except Exception:  # noqa: BLE001 - renewal must go on: as if no token were held
                log.exception("could not read the delegation tokens' dates: the next set half an interval from now")
                held = []
            now = _now_ms()
            delay = max(next_set_in_s(now, interval_ms, held), MIN_GAP_S if renewed else 0.0)
            log.info("delegation tokens in hand: %s; the next set in %.1f s", _describe(held, now), delay)
            time.sleep(delay)
            while not bridge.renewTokensNow():
                log.warning("no new delegation tokens (%s): trying again in %.0f s", bridge.tokenRenewalError(),
                            RETRY_S)
                time.sleep(RETRY_S)
            renewed = True
        except Exception:  # noqa: BLE001 - renewal must not stop: said, then tried again
            log.exception("delegation token renewal failed: trying again in %.0f s", RETRY_S)
            time.sleep(RETRY_S)


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
        for tries_left in range(LISTEN_TRIES - 1, -1, -1):
            try:
                material = json.loads(bridge.tlsMaterial(str(workdir)))
                server = TokenServer(bind_ip, host, secret,
                                     lambda: (bridge.tokensVersion(), bridge.taskTokensBase64()), material)
                break
            except Exception:  # noqa: BLE001 - keytool, the key files, the bind: said, then tried again
                log.exception("the listener for renewed tokens could not start (%d more tries, %.0f s apart)",
                              tries_left, RETRY_S)
                if not tries_left:
                    log.error("running tasks keep the tokens they have; tasks started later get new ones")
                    return
                time.sleep(RETRY_S)
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.5}, name="am-tokens",
                         daemon=True).start()
        service.server = server
        log.info("renewing the job's delegation tokens with the submitter's keytab; executors fetch them from %s",
                 server.url)

    def start_listening() -> None:
        threading.Thread(target=listen, name="am-tokens-tls", daemon=True).start()

    threading.Thread(target=_renew, args=(bridge, attempt, start_listening), name="am-token-renewal",
                     daemon=True).start()
    return service
