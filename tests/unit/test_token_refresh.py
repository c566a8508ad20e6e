"""Renewed delegation tokens reach a running executor only over TLS pinned to the digest its
signed heartbeat answer named, only with a signed request, and land in the token file whole.
In process, 127.0.0.1 only; the certificate is made by openssl as the AM's keytool would."""

import base64
import hashlib
import os
import ssl
import subprocess
import threading
import time

import pytest

from tony_py.am.core import policy
from tony_py.am.tokens import TokenServer
from tony_py.auth import AuthError
from tony_py.executor.tokens import TokenRefresher, install

SECRET = "s3cr3t-for-tests"


@pytest.fixture
def material(tmp_path):
    key, cert = tmp_path / "am.key", tmp_path / "am.crt"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-keyout", str(key), "-out", str(cert), "-days", "1", "-subj", "/CN=tony-py-am"],
                   check=True, capture_output=True)
    der = ssl.PEM_cert_to_DER_cert(cert.read_text())
    return {"cert": str(cert), "key": str(key), "sha256": hashlib.sha256(der).hexdigest()}


@pytest.fixture
def server(material):
    state = {"version": 0, "tokens": base64.b64encode(b"new-token-file-bytes").decode()}
    srv = TokenServer("127.0.0.1", "127.0.0.1", SECRET, lambda: (state["version"], state["tokens"]), material)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield srv, state
    srv.shutdown()
    srv.server_close()


def test_nothing_is_offered_before_the_first_renewal_then_the_address_and_digest(server, material):
    srv, state = server
    assert srv.offer() is None
    state["version"] = 1
    assert srv.offer() == {"version": 1, "url": f"https://127.0.0.1:{srv.port}", "sha256": material["sha256"]}


def test_an_executor_fetches_the_new_set_and_replaces_its_token_file(server, tmp_path):
    srv, state = server
    state["version"] = 3
    (tmp_path / "container").mkdir()
    token_file = tmp_path / "container" / "container_tokens"
    token_file.write_bytes(b"old")
    refresher = TokenRefresher(SECRET, "container_1", str(token_file))
    assert refresher.fetch(srv.offer()) == 3
    assert token_file.read_bytes() == b"new-token-file-bytes"
    assert os.stat(token_file).st_mode & 0o777 == 0o600
    assert [p.name for p in token_file.parent.iterdir()] == ["container_tokens"]  # no temp file left


def test_a_certificate_other_than_the_signed_digest_is_refused_before_anything_is_sent(server, tmp_path):
    srv, state = server
    state["version"] = 1
    offer = dict(srv.offer(), sha256="0" * 64)
    token_file = tmp_path / "container_tokens"
    token_file.write_bytes(b"old")
    with pytest.raises(ssl.SSLError, match="not the one its signed answer named"):
        TokenRefresher(SECRET, "container_1", str(token_file)).fetch(offer)
    assert token_file.read_bytes() == b"old"


def test_without_the_secret_a_request_gets_no_tokens(server, tmp_path):
    srv, state = server
    state["version"] = 1
    with pytest.raises(AuthError):  # the server's 401 is not signed for this caller either
        TokenRefresher("another-secret", "stranger", str(tmp_path / "t")).fetch(srv.offer())
    assert not (tmp_path / "t").exists()


def test_plain_http_to_the_token_listener_gets_nothing(server):
    import socket

    srv, state = server
    state["version"] = 1
    with socket.create_connection(("127.0.0.1", srv.port), timeout=5) as sock:
        sock.sendall(b"GET /v1/tokens HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.settimeout(5)
        try:
            answer = sock.recv(4096)
        except (ConnectionResetError, TimeoutError):
            answer = b""
    assert b"new-token-file-bytes" not in answer and base64.b64encode(b"new-token-file-bytes") not in answer


def test_an_older_or_equal_version_is_not_fetched_again(tmp_path):
    refresher = TokenRefresher(SECRET, "c", str(tmp_path / "t"))
    refresher.version, refresher.source = 2, "0" * 64
    calls = []
    refresher.fetch = lambda offer: calls.append(offer) or offer["version"]
    refresher.offered({"version": 2, "url": "https://h:1", "sha256": "0" * 64})
    refresher.offered("not an offer")
    assert calls == []


def test_a_new_am_attempts_listener_is_fetched_from_although_it_counts_from_1(tmp_path):
    """Each AM attempt numbers its sets from 1 and has its own certificate (its port may be the
    old one's): set 1 of a new listener is newer than set 3 of the old one, and counts on from there."""
    refresher = TokenRefresher(SECRET, "c", str(tmp_path / "t"))
    refresher.version, refresher.source = 3, "a" * 64
    fetched = []
    refresher.fetch = lambda offer: fetched.append(offer["version"]) or offer["version"]

    def offer_and_settle(offer):
        refresher.offered(offer)
        deadline = time.monotonic() + 5
        while (refresher._busy.locked() or not fetched) and time.monotonic() < deadline:
            time.sleep(0.01)

    offer_and_settle({"version": 1, "url": "https://h:1", "sha256": "b" * 64})
    assert fetched == [1] and (refresher.version, refresher.source) == (1, "b" * 64)
    offer_and_settle({"version": 1, "url": "https://h:1", "sha256": "b" * 64})
    assert fetched == [1]  # the same set of the same listener: not again
    offer_and_settle({"version": 2, "url": "https://h:1", "sha256": "b" * 64})
    assert fetched == [1, 2]


def test_install_replaces_in_one_rename(tmp_path):
    target = tmp_path / "tokens"
    target.write_bytes(b"a" * 100)
    install(str(target), b"b" * 10)
    assert target.read_bytes() == b"b" * 10


@pytest.mark.parametrize("text,dead", [
    ("cat: Token  has expired, current time: 2026-11-25 12:11:03 expected renewal time: 2026-11-25 12:10:49", True),
    ("org.apache.hadoop.security.token.SecretManager$InvalidToken: token (HDFS_DELEGATION_TOKEN token 5 for alice) "
     "can't be found in cache", True),
    ("InvalidToken: token is expired", True),
    ("ValueError: learning rate must be positive", False),
    ("", False),
])
def test_dead_delegation_tokens_are_recognised_in_hadoops_words(text, dead):
    assert policy.tokens_expired(text) is dead
