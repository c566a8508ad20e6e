"""Renewed delegation tokens into a running task's token file.

YARN writes a container's token file once, at launch (HADOOP_TOKEN_FILE_LOCATION; it cannot
refresh it: YARN-11954). On a Kerberos cluster with the submitter's keytab the AM renews the
job's tokens (tony_py/am/tokens.py) and says so in its heartbeat answers, signed with the
application's secret: a version, an https:// address and the SHA-256 of the AM's certificate.
The executor then fetches the new set with a signed request over TLS, pinned to that digest (no
CA is involved: the signed answer is what vouches for the certificate), checks the answer's
signature, and replaces the token file atomically (a new file beside it, renamed over it), so a
process that reads it never sees half a file.

What this reaches: every process that reads the token file after the rename (a new `hdfs dfs`,
a new JVM, a framework's HDFS client created later). A JVM that already logged in keeps the
tokens it read at its start (Hadoop reads the file once per process).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import tempfile
import threading

from tony_py.auth import RESPONSE_HEADER, AuthError, Signer, _read

log = logging.getLogger("tony.executor")

PATH = "/v1/tokens"
MAX_ANSWER = 1 << 20
TIMEOUT_S = 10.0


def pinned_connection(host: str, port: int, sha256: str, timeout: float):
    """TLS to a server whose certificate must have exactly this SHA-256 (checked right after the
    handshake, before a byte of the request is sent). ssl and http.client load only here: most
    executors never fetch tokens, and they start without them."""
    import http.client
    import ssl

    class Pinned(http.client.HTTPSConnection):
        def connect(self):
            super().connect()
            der = self.sock.getpeercert(binary_form=True) or b""
            if not hmac.compare_digest(hashlib.sha256(der).hexdigest(), sha256):
                self.close()
                raise ssl.SSLError("the AM's certificate is not the one its signed answer named")

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # trust is the pinned digest, not a CA
    return Pinned(host, port, timeout=timeout, context=context)


class TokenRefresher:
    def __init__(self, secret: str, principal: str, token_file: str | None):
        self.signer = Signer(secret, f"{principal}.tokens")
        self.token_file = token_file
        self.version = 0
        self.source = None  # the certificate of the listener that served self.version: each AM attempt
        # has its own (and counts from 1), even where it got the same port
        self._busy = threading.Lock()

    def offered(self, offer) -> None:
        """A heartbeat answer's "tokens": fetch them in the background if they are newer."""
        if not isinstance(offer, dict) or not self.token_file:
            return
        version = offer.get("version")
        if not isinstance(version, int) or (offer.get("sha256") == self.source and version <= self.version):
            return
        if not self._busy.acquire(blocking=False):
            return
        threading.Thread(target=self._fetch_guarded, args=(offer,), name="tokens", daemon=True).start()

    def _fetch_guarded(self, offer: dict) -> None:
        try:
            self.version, self.source = self.fetch(offer), offer.get("sha256")
            log.info("the job's delegation tokens were renewed (set %d): %s rewritten", self.version,
                     os.path.basename(self.token_file))
        except (OSError, AuthError, ValueError, KeyError) as exc:  # ssl.SSLError is an OSError
            log.warning("could not fetch the renewed delegation tokens (set %s): %s; asking again at the next "
                        "heartbeat", offer.get("version"), exc)
        finally:
            self._busy.release()

    def fetch(self, offer: dict) -> int:
        from urllib.parse import urlsplit

        parts = urlsplit(str(offer.get("url", "")))
        sha256 = str(offer.get("sha256", ""))
        if parts.scheme != "https" or not parts.hostname or not parts.port or len(sha256) != 64:
            raise ValueError(f"not a token offer: {offer!r}")
        headers, nonce = self.signer.sign("GET", PATH, b"", f"{parts.hostname}:{parts.port}")
        conn = pinned_connection(parts.hostname, parts.port, sha256, TIMEOUT_S)
        try:
            conn.request("GET", PATH, headers=headers)
            resp = conn.getresponse()
            raw = _read(resp, MAX_ANSWER)
            self.signer.check_answer(nonce, resp.status, raw, resp.getheader(RESPONSE_HEADER))
        finally:
            conn.close()
        if resp.status != 200:
            raise OSError(f"HTTP {resp.status}: {raw[:200]!r}")
        answer = json.loads(raw)
        install(self.token_file, base64.b64decode(answer["tokens"], validate=True))
        return int(answer["version"])


def install(token_file: str, data: bytes) -> None:
    """Replace the token file in one rename (same dir, same mode 0600)."""
    directory = os.path.dirname(os.path.abspath(token_file))
    fd, tmp = tempfile.mkstemp(prefix=".tokens-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
        os.chmod(tmp, 0o600)
        os.replace(tmp, token_file)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
