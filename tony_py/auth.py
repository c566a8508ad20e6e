"""Signed, non-replayable HTTP between the AM, its executors and the client.

Every process of a job shares one per-application secret (tony_py/appsecret.py). This channel
never carries it: each request carries an HMAC-SHA256 of what it says, and each answer an HMAC
bound to that request, so

- the AM obeys only requests made with the secret, each at most once (a per-sender sequence
  number that only grows: a captured request cannot be replayed), and only requests made for it:
  the signature covers the receiver (the host:port the request was sent to), so a request
  captured on its way to one executor's control endpoint, or to one AM attempt, means nothing
  to another; the sequence number is the sender's clock in ns, and one more than
  SEQ_WINDOW_S from the receiver's is refused (a captured request expires; a sender whose clock
  runs an hour ahead cannot lock a principal out by raising its last number);
- an executor obeys only answers made with the secret for the request it just sent: a process
  that takes over a dead AM's port learns nothing (no bearer token to steal) and cannot inject
  an environment or an instruction.

Wire format, request header:
    X-Tony-Auth: TONY-HMAC-SHA256 principal=<sender id>,seq=<n>,sig=<hex>
    sig = HMAC(secret, "req" | METHOD | target (path?query) | receiver (host:port) | principal | seq | sha256(body))
and answer header:
    X-Tony-Signature: <hex>,  HMAC(secret, "resp" | principal | seq | status | sha256(body))

What it does not do: hide the traffic. Task states, cluster addresses and stderr tails cross
the network in clear (as YARN's own container logs do); the threat model is in
docs/architecture.md ("Trust").
"""

from __future__ import annotations

import hashlib
import hmac
import re
import threading
import time
from collections import OrderedDict
from typing import Callable

SCHEME = "TONY-HMAC-SHA256"
REQUEST_HEADER = "X-Tony-Auth"
RESPONSE_HEADER = "X-Tony-Signature"
_HEADER = re.compile(rf"^{SCHEME} principal=([A-Za-z0-9_.:@-]{{1,200}}),seq=(\d{{1,25}}),sig=([0-9a-f]{{64}})$")
_SIGNATURE = re.compile(r"^[0-9a-f]{64}$")
MAX_ANSWER = 16 << 20  # read no more of an answer than this before its signature is checked
MAX_PRINCIPALS = 50_000  # senders remembered for replay checks (oldest forgotten first)
SEQ_WINDOW_S = 300.0  # how far a request's time may be from the receiver's (Kerberos allows as much)


class AuthError(Exception):
    """A request or answer without a valid signature, or a replayed one."""


class SkewError(AuthError):
    """A request signed with the secret, for this receiver, whose time is too far from the
    receiver's clock: refused with a signed answer (its sender is ours and should say why)."""

    def __init__(self, message: str, nonce: tuple[str, int]):
        super().__init__(message)
        self.nonce = nonce


class UnsignedAnswer(AuthError):
    """An HTTP answer without a valid signature (its status is kept: a server refuses an
    oversized request before it can check who sent it, so a 413 cannot be signed)."""

    def __init__(self, status: int):
        super().__init__(f"the answer (HTTP {status}) is not signed with this application's secret")
        self.status = status


def client_principal() -> str:
    """A name of its own for each client process: the AM keeps the last sequence number per
    name, and clients on machines whose clocks differ must not share one."""
    import secrets

    return f"client-{secrets.token_hex(8)}"


class _Mac:
    """HMAC-SHA256 with the secret, keyed once (a copy per message is cheaper than a new key)."""

    def __init__(self, secret: str):
        self._keyed = hmac.new(secret.encode(), digestmod=hashlib.sha256)

    def __call__(self, *parts: str) -> str:
        h = self._keyed.copy()
        h.update("\n".join(parts).encode())
        return h.hexdigest()


NOTEBOOK_TOKEN_PURPOSE = "jupyter-token"
RAY_TOKEN_PURPOSE = "ray-token"


def derived_token(secret: str, purpose: str) -> str:
    """A credential for one purpose (the notebook's Jupyter token), derived from the app secret
    where it is needed instead of travelling: the client and the executor both hold the secret."""
    return _Mac(secret)("derived", purpose)


def _digest(body: bytes) -> str:
    return hashlib.sha256(body or b"").hexdigest()


class Signer:
    """The sending side: signs requests, checks the answers."""

    def __init__(self, secret: str, principal: str):
        self._mac = _Mac(secret)
        self.principal = principal
        self._last = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the secret
        return f"Signer({self.principal!r})"

    def sign(self, method: str, target: str, body: bytes = b"", receiver: str = "") -> tuple[dict[str, str], tuple[str, int]]:
        """Headers for one request to `receiver` (host:port), and the nonce its answer must be
        signed for."""
        with self._lock:
            seq = self._last = max(time.time_ns(), self._last + 1)
        sig = self._mac("req", method.upper(), target, receiver, self.principal, str(seq), _digest(body))
        header = f"{SCHEME} principal={self.principal},seq={seq},sig={sig}"
        return {REQUEST_HEADER: header}, (self.principal, seq)

    def check_answer(self, nonce: tuple[str, int], status: int, body: bytes, signature: str | None) -> None:
        expected = self._mac("resp", nonce[0], str(nonce[1]), str(status), _digest(body))
        # the form first: compare_digest raises on non-ASCII text, which anyone can send
        if not signature or not _SIGNATURE.match(signature) or not hmac.compare_digest(expected, signature):
            raise AuthError("the answer is not signed with this application's secret")


class Verifier:
    """The receiving side: checks requests (signature, then freshness), signs the answers."""

    def __init__(self, secret: str, receiver: str = "", window_s: float = SEQ_WINDOW_S,
                 clock: Callable[[], float] = time.time):
        self._mac = _Mac(secret)
        self.receiver = receiver  # this server's host:port, as its senders address it
        self.window_s = window_s
        self.clock = clock
        self._last: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "Verifier(...)"

    def check(self, method: str, target: str, body: bytes, header: str | None) -> tuple[str, int]:
        """The request's nonce (principal, seq) if it is signed with the secret for this receiver,
        within the time window and newer than anything this principal sent before; AuthError
        otherwise (and nothing is recorded)."""
        m = _HEADER.match(header or "")
        if not m:
            raise AuthError("missing or malformed X-Tony-Auth header")
        principal, seq, sig = m.group(1), int(m.group(2)), m.group(3)
        expected = self._mac("req", method.upper(), target, self.receiver, principal, str(seq), _digest(body))
        if not hmac.compare_digest(expected, sig):
            raise AuthError("bad signature (or a request meant for another receiver)")
        off = seq / 1e9 - self.clock()
        if abs(off) > self.window_s:
            raise SkewError(f"the request's clock is {off:+.0f} s from this server's (at most {self.window_s:.0f} s "
                            "either way: are the machines' clocks synchronised?)", (principal, seq))
        with self._lock:
            if seq <= self._last.get(principal, 0):
                raise AuthError("replayed request")
            self._last[principal] = seq
            self._last.move_to_end(principal)
            while len(self._last) > MAX_PRINCIPALS:
                self._last.popitem(last=False)
        return principal, seq

    def sign_answer(self, nonce: tuple[str, int], status: int, body: bytes, digest: str | None = None) -> str:
        """digest: sha256 of body, when the caller has it (a large body sent many times)."""
        return self._mac("resp", nonce[0], str(nonce[1]), str(status), digest or _digest(body))

    # A later AM attempt continues where this one stopped, so old requests stay refused.
    def last_seen(self) -> dict[str, int]:
        with self._lock:
            return dict(self._last)

    def restore(self, last: dict[str, int]) -> None:
        with self._lock:
            for principal, seq in last.items():
                if seq > self._last.get(principal, 0):
                    self._last[principal] = seq


# ---- a signed JSON call over HTTP (standard library: the executor has nothing else) ------------
class KeepAlive:
    """One persistent HTTP/1.1 connection to a server, for a caller that talks to it every
    second (an executor's heartbeats): no connect and no server-side setup per request. A
    connection the server closed while idle is replaced once, silently; concurrent callers
    that find it busy use a connection of their own for that call."""

    def __init__(self) -> None:
        self._conn = None
        self._origin: tuple[str, int] | None = None
        self._lock = threading.Lock()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def exchange(self, origin: tuple[str, int], method: str, target: str, body: bytes,
                 make_headers: Callable[[], dict[str, str]], timeout: float,
                 max_bytes: int = MAX_ANSWER) -> tuple[int, bytes, str | None, str | None]:
        import http.client

        if not self._lock.acquire(blocking=False):
            return _one_off(origin, method, target, body, make_headers(), timeout, max_bytes)
        try:
            if self._origin != origin:
                self.close()
                self._origin = origin
            for retry in (False, True):
                reused = self._conn is not None
                if not reused:
                    self._conn = http.client.HTTPConnection(*origin, timeout=timeout)
                elif self._conn.sock is not None:
                    self._conn.sock.settimeout(timeout)
                try:
                    self._conn.request(method, target, body=body if method == "POST" else None,
                                       headers=make_headers())
                    resp = self._conn.getresponse()
                    raw = _read(resp, max_bytes)
                    if resp.will_close:
                        self.close()
                    return resp.status, raw, resp.getheader(RESPONSE_HEADER), resp.getheader("Content-Encoding")
                except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                    self.close()
                    if not reused or retry:
                        raise
                    # the server closed the idle connection: once more on a new one (re-signed)
                except BaseException:
                    self.close()
                    raise
            raise AssertionError("unreachable")
        finally:
            self._lock.release()


def _one_off(origin, method, target, body, headers, timeout,
             max_bytes=MAX_ANSWER) -> tuple[int, bytes, str | None, str | None]:
    import http.client

    conn = http.client.HTTPConnection(*origin, timeout=timeout)
    try:
        conn.request(method, target, body=body if method == "POST" else None, headers=headers)
        resp = conn.getresponse()
        return resp.status, _read(resp, max_bytes), resp.getheader(RESPONSE_HEADER), resp.getheader("Content-Encoding")
    finally:
        conn.close()


def _read(resp, max_bytes: int) -> bytes:
    """An answer's body, refused (OSError; the connection is then closed) past max_bytes: it is
    read before its signature can be checked, so its size is the sender's to choose."""
    declared = resp.getheader("Content-Length")
    if declared is not None and declared.isdigit() and int(declared) > max_bytes:
        raise OSError(f"an answer of {declared} bytes, more than the {max_bytes} expected")
    raw = resp.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise OSError(f"an answer of more than the {max_bytes} bytes expected")
    return raw


def _origin(base_url: str) -> tuple[str, int]:
    from urllib.parse import urlsplit

    parts = urlsplit(base_url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"not an http:// URL: {base_url!r}")
    return parts.hostname, parts.port or 80


def call_signed(signer: Signer, base_url: str, method: str, target: str, payload: dict | None,
                timeout: float, keep_alive: KeepAlive | None = None, max_bytes: int = MAX_ANSWER,
                gzip_ok: bool = False) -> tuple[int, bytes]:
    """One signed request; returns (status, the answer's body). An answer that is not signed for
    this request raises UnsignedAnswer (never trusted, whatever it says); connection errors
    propagate. gzip_ok: the answer may come gzip-compressed (a large spec); its signature covers
    the bytes sent, checked before they are decompressed (to at most max_bytes)."""
    import http.client
    import json

    body = json.dumps(payload).encode() if payload is not None else b""
    nonce: list[tuple[str, int]] = []

    def make_headers() -> dict[str, str]:  # signed afresh for each try: a sequence number is used once
        headers, n = signer.sign(method, full_target, body, receiver)
        nonce[:] = [n]
        if method == "POST":
            headers["Content-Type"] = "application/json"
        if gzip_ok:
            headers["Accept-Encoding"] = "gzip"
        return headers

    origin = _origin(base_url)
    receiver = f"{origin[0]}:{origin[1]}"
    prefix = base_url.split("://", 1)[1].partition("/")[2].rstrip("/")
    full_target = (f"/{prefix}" if prefix else "") + target
    try:
        if keep_alive is not None:
            status, raw, signature, encoding = keep_alive.exchange(origin, method, full_target, body, make_headers,
                                                                   timeout, max_bytes)
        else:
            status, raw, signature, encoding = _one_off(origin, method, full_target, body, make_headers(), timeout,
                                                        max_bytes)
    except http.client.HTTPException as exc:
        raise OSError(f"garbled answer: {exc}") from None
    try:
        signer.check_answer(nonce[0], status, raw, signature)
    except AuthError:
        raise UnsignedAnswer(status) from None
    if encoding == "gzip" and gzip_ok:  # (the header is not signed: the bytes are, and they decide)
        raw = gunzip(raw, max_bytes)
    elif encoding not in (None, "", "identity"):
        raise ValueError(f"an answer in an encoding not asked for: {encoding}")
    return status, raw


def gunzip(raw: bytes, max_bytes: int) -> bytes:
    """A gzip body of one or more members (a spec's shared part and its own), refused past max_bytes."""
    import zlib

    out, rest = [], raw
    size = 0
    while rest:
        member = zlib.decompressobj(wbits=31)
        try:
            data = member.decompress(rest, max_bytes + 1 - size)
        except zlib.error as exc:  # a caller retries a garbled answer (ValueError) rather than dying
            raise ValueError(f"a compressed answer that does not decompress: {exc}") from None
        size += len(data)
        if size > max_bytes or member.unconsumed_tail:
            raise ValueError(f"a compressed answer of more than the {max_bytes} bytes expected")
        if not member.eof:
            raise ValueError("a truncated compressed answer")
        out.append(data)
        rest = member.unused_data
    return b"".join(out)


def call_json(signer: Signer, base_url: str, method: str, target: str, payload: dict | None,
              timeout: float, keep_alive: KeepAlive | None = None) -> tuple[int, dict | None]:
    """call_signed for a JSON answer."""
    status, raw = call_signed(signer, base_url, method, target, payload, timeout, keep_alive)
    return status, json_answer(raw)


def json_answer(raw: bytes):
    """A signed answer's body as JSON (None if empty); ValueError if it is not JSON."""
    import json

    try:
        return json.loads(raw) if raw else None
    except ValueError:
        raise ValueError("a signed answer that is not JSON") from None
