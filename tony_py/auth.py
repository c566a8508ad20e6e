"""Signed, non-replayable HTTP between the AM, its executors and the client.

Every process of a job shares one per-application secret (tony_py/appsecret.py). It is never
sent anywhere: each request carries an HMAC-SHA256 of what it says, and each answer an HMAC
bound to that request, so

- the AM obeys only requests made with the secret, each at most once (a per-sender sequence
  number that only grows: a captured request cannot be replayed);
- an executor obeys only answers made with the secret for the request it just sent: a process
  that takes over a dead AM's port learns nothing (no bearer token to steal) and cannot inject
  an environment or an instruction.

Wire format, request header:
    X-Tony-Auth: TONY-HMAC-SHA256 principal=<sender id>,seq=<n>,sig=<hex>
    sig = HMAC(secret, "req" | METHOD | target (path?query) | principal | seq | sha256(body))
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

SCHEME = "TONY-HMAC-SHA256"
REQUEST_HEADER = "X-Tony-Auth"
RESPONSE_HEADER = "X-Tony-Signature"
_HEADER = re.compile(rf"^{SCHEME} principal=([A-Za-z0-9_.:@-]{{1,200}}),seq=(\d{{1,25}}),sig=([0-9a-f]{{64}})$")
MAX_PRINCIPALS = 50_000  # senders remembered for replay checks (oldest forgotten first)


class AuthError(Exception):
    """A request or answer without a valid signature, or a replayed one."""


class UnsignedAnswer(AuthError):
    """An HTTP answer without a valid signature (its status is kept: a server refuses an
    oversized request before it can check who sent it, so a 413 cannot be signed)."""

    def __init__(self, status: int):
        super().__init__(f"the answer (HTTP {status}) is not signed with this application's secret")
        self.status = status


def _mac(key: bytes, *parts: str | bytes) -> str:
    data = b"\n".join(p if isinstance(p, bytes) else p.encode() for p in parts)
    return hmac.new(key, data, hashlib.sha256).hexdigest()


def _digest(body: bytes) -> str:
    return hashlib.sha256(body or b"").hexdigest()


class Signer:
    """The sending side: signs requests, checks the answers."""

    def __init__(self, secret: str, principal: str):
        self._key = secret.encode()
        self.principal = principal
        self._last = 0
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never the secret
        return f"Signer({self.principal!r})"

    def sign(self, method: str, target: str, body: bytes = b"") -> tuple[dict[str, str], tuple[str, int]]:
        """Headers for one request, and the nonce its answer must be signed for."""
        with self._lock:
            seq = self._last = max(time.time_ns(), self._last + 1)
        sig = _mac(self._key, "req", method.upper(), target, self.principal, str(seq), _digest(body))
        header = f"{SCHEME} principal={self.principal},seq={seq},sig={sig}"
        return {REQUEST_HEADER: header}, (self.principal, seq)

    def check_answer(self, nonce: tuple[str, int], status: int, body: bytes, signature: str | None) -> None:
        expected = _mac(self._key, "resp", nonce[0], str(nonce[1]), str(status), _digest(body))
        if not signature or not hmac.compare_digest(expected, signature):
            raise AuthError("the answer is not signed with this application's secret")


class Verifier:
    """The receiving side: checks requests (signature, then freshness), signs the answers."""

    def __init__(self, secret: str):
        self._key = secret.encode()
        self._last: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return "Verifier(...)"

    def check(self, method: str, target: str, body: bytes, header: str | None) -> tuple[str, int]:
        """The request's nonce (principal, seq) if it is signed with the secret and newer than
        anything this principal sent before; AuthError otherwise (and nothing is recorded)."""
        m = _HEADER.match(header or "")
        if not m:
            raise AuthError("missing or malformed X-Tony-Auth header")
        principal, seq, sig = m.group(1), int(m.group(2)), m.group(3)
        expected = _mac(self._key, "req", method.upper(), target, principal, str(seq), _digest(body))
        if not hmac.compare_digest(expected, sig):
            raise AuthError("bad signature")
        with self._lock:
            if seq <= self._last.get(principal, 0):
                raise AuthError("replayed request")
            self._last[principal] = seq
            self._last.move_to_end(principal)
            while len(self._last) > MAX_PRINCIPALS:
                self._last.popitem(last=False)
        return principal, seq

    def sign_answer(self, nonce: tuple[str, int], status: int, body: bytes) -> str:
        return _mac(self._key, "resp", nonce[0], str(nonce[1]), str(status), _digest(body))

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
def call_json(signer: Signer, base_url: str, method: str, target: str, payload: dict | None,
              timeout: float) -> tuple[int, dict | None]:
    """One signed request; returns (status, JSON answer). An answer that is not signed for this
    request raises AuthError (never trusted, whatever it says); connection errors propagate."""
    import http.client
    import json
    import urllib.error
    import urllib.request

    body = json.dumps(payload).encode() if payload is not None else b""
    headers, nonce = signer.sign(method, target, body)
    request = urllib.request.Request(base_url.rstrip("/") + target, data=body if method == "POST" else None,
                                     method=method, headers=headers)
    if method == "POST":
        request.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            status, raw, signature = resp.status, resp.read(), resp.headers.get(RESPONSE_HEADER)
    except urllib.error.HTTPError as exc:
        status, raw, signature = exc.code, exc.read(), exc.headers.get(RESPONSE_HEADER)
    except http.client.HTTPException as exc:
        raise OSError(f"garbled answer: {exc}") from None
    try:
        signer.check_answer(nonce, status, raw, signature)
    except AuthError:
        raise UnsignedAnswer(status) from None
    try:
        return status, (json.loads(raw) if raw else None)
    except ValueError:
        raise ValueError("a signed answer that is not JSON") from None
