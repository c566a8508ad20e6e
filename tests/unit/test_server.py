"""The AM's HTTP server, for real on loopback, in front of a real coordinator (fake cluster port):
signatures, replays, numbers, body limits, the connection cap and who sees what."""

import gzip
import json
import os
import socket
import threading
import time

import pytest

from harness import Harness
from tony_py.am.core import report
from tony_py.am.http import server as server_module
from tony_py.am.http.server import AmHttpServer, JobFiles
from tony_py.auth import REQUEST_HEADER, RESPONSE_HEADER, Signer, UnsignedAnswer, Verifier, call_json, call_signed, gunzip
from tony_py.executor.channel import AmChannel, AmUnreachable, RequestRefused
from tony_py.executor.settings import Instruction, Settings
from tony_py.executor.supervisor import Executor

SECRET = "a1" * 32


@pytest.fixture
def am(tmp_path):
    """A running server; `am.url`, `am.h` (the coordinator harness), `am.signer`."""
    h = Harness(tmp_path, "tony.worker.instances=1")
    h.containers["worker:0"] = h.allocate("worker")
    h.c.on_started(h.containers["worker:0"])

    def status(trusted):
        data = h.c.status(lambda t: "http://nm/logs")
        return data if trusted else report.public_view(data)

    srv = AmHttpServer(("127.0.0.1", 0), h.c, Verifier(SECRET), status, trusted_addresses=frozenset({"127.0.0.9"}),
                       max_connections=3)
    threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    srv.h, srv.url, srv.signer = h, f"http://127.0.0.1:{srv.port}", Signer(SECRET, h.containers["worker:0"])
    yield srv
    srv.shutdown()
    srv.server_close()


def raw_request(port: int, data: bytes, timeout: float = 30) -> bytes:
    """The whole answer: every request here closes its connection, so EOF ends the read at once."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        chunks = []
        while True:
            try:
                chunk = s.recv(65536)
            except socket.timeout:
                break
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)


def register_body(am, **extra):
    return {"task": "worker:0", "attempt": 0, "container": am.h.containers["worker:0"], "port": 2000, **extra}


def test_only_signed_fresh_requests_are_obeyed_and_answers_are_signed(am):
    status, answer = call_json(am.signer, am.url, "POST", "/v1/register", register_body(am), 5)
    assert status == 200 and answer["ok"]  # and call_json checked the answer's signature
    stranger = Signer("b2" * 32, am.signer.principal)
    with pytest.raises(UnsignedAnswer) as refused:
        call_json(stranger, am.url, "POST", "/v1/heartbeat", register_body(am), 5)
    assert refused.value.status == 401
    # a captured request replayed byte for byte is refused
    body = json.dumps(register_body(am)).encode()
    headers, _ = am.signer.sign("POST", "/v1/heartbeat", body, am.verifier.receiver)
    request = (f"POST /v1/heartbeat HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
               + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode() + body
    assert raw_request(am.port, request).startswith(b"HTTP/1.1 200")
    assert raw_request(am.port, request).startswith(b"HTTP/1.1 401")
    # the old bearer token means nothing
    bearer = b"POST /v1/heartbeat HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 2\r\nAuthorization: Bearer " \
             + SECRET.encode() + b"\r\n\r\n{}"
    assert raw_request(am.port, bearer).startswith(b"HTTP/1.1 401")


@pytest.mark.parametrize("target,words", [
    ("/v1/spec?task=worker:0&attempt=0&timeout=nan", "finite"),
    ("/v1/spec?task=worker:0&attempt=0&timeout=inf", "finite"),
    ("/v1/spec?task=worker:0&attempt=x", "attempt must be a number"),
    ("/v1/spec?attempt=0", "task is required"),
])
def test_numbers_from_requests_are_finite_and_checked(am, target, words):
    # refused, not waited on: a long-poll would still be waiting when call_json gives up (30 s)
    status, answer = call_json(am.signer, am.url, "GET", target, None, 30)
    assert status == 400 and words in answer["error"]


def test_durations_are_clamped_identifiers_are_not(am):
    assert call_json(am.signer, am.url, "GET", "/v1/spec?task=worker:0&attempt=0&timeout=-9", None, 5)[0] == 204
    for bad in ({"port": 70000}, {"port": 0}, {"tb_port": 1.5}, {"attempt": -1}):
        status, answer = call_json(am.signer, am.url, "POST", "/v1/register", register_body(am, **bad), 5)
        assert status == 400, bad
    status, answer = call_json(am.signer, am.url, "POST", "/v1/heartbeat",
                               register_body(am, metrics={"rss": float("nan")}), 5)
    assert status == 400 and "finite" in answer["error"]


def test_body_limits(am):
    no_length = b"POST /v1/result HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
    assert b"Content-Length is required" in raw_request(am.port, no_length)
    negative = b"POST /v1/result HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: -5\r\n\r\n"
    assert raw_request(am.port, negative).startswith(b"HTTP/1.1 400")
    huge = b"POST /v1/result HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 99999999\r\n\r\n"
    assert raw_request(am.port, huge).startswith(b"HTTP/1.1 413")


def test_an_unsigned_413_is_no_answer_and_a_huge_result_goes_without_its_details(am, tmp_path):
    """The AM refuses an oversized body before it knows who sent it, so its 413 cannot be signed:
    anyone could send one, and an executor that obeyed it would kill its task. The executor
    instead sends a result the AM can take (its details dropped past MAX_RESULT)."""
    body = register_body(am, exit_code=3, stderr_tail="e" * (server_module.MAX_BODY + 10))
    with pytest.raises(AmUnreachable, match="HTTP 413"):  # retried, never acted on
        AmChannel(am.url, am.signer, give_up_after_s=0.5).post("/v1/result", body)
    assert am.h.c.tasks["worker:0"].exit_code is None
    settings = Settings(task="worker:0", am_url=am.url, secret=SECRET, container_id=am.h.containers["worker:0"],
                        command="python t.py", execution_env={}, heartbeat_s=1, metrics_interval_s=5,
                        execution_timeout_s=0, registry_timeout_s=0, reserve_tb_port=False, src_zip=None,
                        runtime_dir="", log_dir=tmp_path, am_lost_timeout_s=5)
    executor = Executor(settings, AmChannel(am.url, am.signer, give_up_after_s=5), {}, tmp_path)
    with pytest.raises(Instruction):  # the AM answers "exit": the job is decided
        executor._report(0, body)
    assert am.h.c.tasks["worker:0"].exit_code == 3


def test_idle_connections_are_capped_and_timed_out(am):
    am.http.request_timeout_s = 0.5
    idle = [socket.create_connection(("127.0.0.1", am.port)) for _ in range(3)]
    try:
        deadline = time.monotonic() + 30
        while len(am.http.connections) < 3:  # the server has taken all three
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert raw_request(am.port, b"GET /status.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(
            b"HTTP/1.1 503")
        for s in idle:  # the silent ones are dropped after the request timeout: the server closes them
            s.settimeout(30)
            try:
                assert s.recv(100) == b""
            except ConnectionResetError:
                pass
        assert raw_request(am.port, b"GET /status.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
                           ).startswith(b"HTTP/1.1 200")
    finally:
        for s in idle:
            s.close()


def test_anonymous_viewers_see_states_only(am):
    am.h.report_result("worker:0", 0, am.h.containers["worker:0"], 3, None, stderr_tail="password=hunter2")
    anonymous = json.loads(raw_request(am.port, b"GET /status.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                           .split(b"\r\n\r\n", 1)[1])
    assert anonymous["tasks"] == [{"name": "worker:0", "type": "worker", "index": 0, "state": "FAILED",
                                   "tracked": True, "attempt": 0}]
    assert "hunter2" not in json.dumps(anonymous) and "diagnostics" not in anonymous
    status, full = call_json(am.signer, am.url, "GET", "/status.json", None, 5)
    assert "hunter2" in full["diagnostics"] and full["tasks"][0]["host"] == "host1"
    am.trusted_addresses = frozenset({"127.0.0.1"})  # as if this were YARN's web proxy
    proxied = raw_request(am.port, b"GET /status.json HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b"hunter2" in proxied


def test_executors_fetch_the_job_and_src_dir_signed_and_strangers_get_nothing(am, tmp_path):
    src = tmp_path / "src.zip"
    src.write_bytes(os.urandom(300_000))
    job = {"spec": {"name": "j"}, "final_conf": "<configuration/>"}
    am.job_files = JobFiles(json.dumps(job).encode(), src)
    channel = AmChannel(am.url, am.signer, give_up_after_s=2)
    assert channel.job("worker:0") == job
    for _ in range(2):  # read once, served (and signed) again and again
        dest = tmp_path / "got.zip"
        assert channel.download_src("worker:0", dest) == 300_000 and dest.read_bytes() == src.read_bytes()
    stranger = Signer("b2" * 32, am.signer.principal)
    for target in ("/v1/job?task=worker:0", "/v1/src?task=worker:0"):
        raw = raw_request(am.port, f"GET {target} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        assert raw.startswith(b"HTTP/1.1 401") and b"configuration" not in raw and len(raw) < 1000
        with pytest.raises(UnsignedAnswer) as refused:
            call_json(stranger, am.url, "GET", target, None, 5)
        assert refused.value.status == 401
    # an AM that does not serve the src_dir (YARN localized it) says so, signed: final, no retry
    am.job_files = JobFiles(json.dumps(job).encode(), None)
    with pytest.raises(RequestRefused, match="404"):
        channel.download_src("worker:0", tmp_path / "none.zip")
    am.job_files = None
    with pytest.raises(RequestRefused, match="404"):
        channel.job("worker:0")


def test_a_gang_fetching_the_src_dir_at_once_gets_it_whole(am, tmp_path):
    """Sent with sendfile, not copied per client: every one of them gets every byte, and the
    connection goes on serving (keep-alive) after it."""
    src = tmp_path / "src.zip"
    src.write_bytes(os.urandom(3 << 20))
    # the fixture's server takes 3 connections; a gang needs more
    srv = AmHttpServer(("127.0.0.1", 0), am.h.c, Verifier(SECRET), lambda trusted: {}, max_connections=64,
                       job_files=JobFiles(b'{"spec": {}, "final_conf": ""}', src))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    results = {}

    def fetch(i):
        channel = AmChannel(f"http://127.0.0.1:{srv.port}", Signer(SECRET, f"container_{i}"), give_up_after_s=5)
        dest = tmp_path / f"got-{i}.zip"
        size = channel.download_src("worker:0", dest)
        results[i] = (size, dest.read_bytes() == src.read_bytes(), channel.job("worker:0")["spec"])

    threads = [threading.Thread(target=fetch, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    srv.shutdown()
    srv.server_close()
    assert results == {i: (3 << 20, True, {}) for i in range(12)}


def test_a_spec_comes_gzipped_to_an_executor_that_takes_it_signed_over_what_was_sent(am):
    """The real executor's channel asks for gzip; the answer's signature covers the compressed
    bytes and they decompress to the same spec a plain request gets."""
    cid = am.h.containers["worker:0"]
    call_json(am.signer, am.url, "POST", "/v1/register", register_body(am), 5)
    channel = AmChannel(am.url, am.signer, give_up_after_s=5)
    query = f"task=worker:0&attempt=0&container={cid}&timeout=5"
    status, plain = call_json(am.signer, am.url, "GET", f"/v1/spec?{query}", None, 10)
    assert status == 200 and plain["env"]["TONY_RESTART_ATTEMPT"] == "0" and "shared" in plain
    assert channel.wait_spec("worker:0", 0, cid, timeout=5) == plain
    # on the wire: gzip members, signed as sent
    headers, nonce = am.signer.sign("GET", f"/v1/spec?{query}", b"", f"127.0.0.1:{am.port}")
    head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    raw = raw_request(am.port, f"GET /v1/spec?{query} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: gzip\r\n{head}"
                               "Connection: close\r\n\r\n".encode())
    top, _, body = raw.partition(b"\r\n\r\n")
    fields = {k.lower(): v for k, _, v in (line.partition(": ") for line in top.decode().split("\r\n")[1:])}
    assert fields["content-encoding"] == "gzip" and body[:2] == b"\x1f\x8b"
    am.signer.check_answer(nonce, 200, body, fields[RESPONSE_HEADER.lower()])
    assert json.loads(gunzip(body, 1 << 20)) == plain


def test_a_gzip_header_on_an_answer_not_asked_for_in_gzip_is_refused_not_inflated(am):
    """Content-Encoding is not signed: an answer only the caller that asked for gzip inflates,
    and one that does not decompress is a garbled answer (retried), never a crash."""
    verifier = Verifier(SECRET, "127.0.0.1:80")

    class Forged:
        """Answers validly signed plain JSON with a Content-Encoding added on the way."""

        def __init__(self, body):
            self.body = body

        def exchange(self, origin, method, target, body, make_headers, timeout, max_bytes):
            headers = make_headers()
            nonce = verifier.check(method, target, body, headers[REQUEST_HEADER])
            return 200, self.body, verifier.sign_answer(nonce, 200, self.body), "gzip"

    with pytest.raises(ValueError, match="not asked for"):
        call_signed(am.signer, "http://127.0.0.1:80", "POST", "/v1/heartbeat", {}, 5, keep_alive=Forged(b"{}"))
    with pytest.raises(ValueError, match="does not decompress"):
        call_signed(am.signer, "http://127.0.0.1:80", "GET", "/v1/spec", None, 5, keep_alive=Forged(b"{}"),
                    gzip_ok=True)
    call_json(am.signer, am.url, "POST", "/v1/register", register_body(am), 5)
    cid = am.h.containers["worker:0"]
    query = f"task=worker:0&attempt=0&container={cid}&timeout=5"
    status, raw = call_signed(am.signer, am.url, "GET", f"/v1/spec?{query}", None, 10, gzip_ok=True)
    assert status == 200 and json.loads(raw)["env"]


def test_a_compressed_answer_past_its_limit_or_cut_short_is_refused():
    two = gzip.compress(b'{"a":', mtime=0) + gzip.compress(b"1}", mtime=0)
    assert gunzip(two, 100) == b'{"a":1}'
    with pytest.raises(ValueError, match="more than"):
        gunzip(gzip.compress(b"x" * 10_000), 9_999)
    with pytest.raises(ValueError, match="truncated"):
        gunzip(two[:-6], 100)


def test_the_src_dir_is_served_once_the_am_has_fetched_it_and_a_failed_fetch_is_final(am, tmp_path):
    """The AM downloads the archive from the staging dir as it starts (no localizer): an executor
    asking before that waits for it; one the AM could not get is each asker's setup failure, with
    the reason, at once (not retried for the AM-lost timeout)."""
    src = tmp_path / "src.zip"
    fetched = threading.Event()

    def fetch():
        fetched.wait(10)
        src.write_bytes(b"zipped")

    am.job_files = JobFiles(b'{"spec": {}, "final_conf": ""}', src, fetch)
    channel = AmChannel(am.url, am.signer, give_up_after_s=5)
    threading.Timer(0.3, fetched.set).start()
    began = time.monotonic()
    assert channel.download_src("worker:0", tmp_path / "got.zip") == 6 and time.monotonic() - began >= 0.25

    def broken():
        raise RuntimeError("java.io.FileNotFoundException: tony_src_app_1.zip")

    failing = AmHttpServer(("127.0.0.1", 0), am.h.c, Verifier(SECRET), lambda trusted: {},
                           job_files=JobFiles(b"{}", tmp_path / "never.zip", broken))
    threading.Thread(target=failing.serve_forever, daemon=True).start()
    channel = AmChannel(f"http://127.0.0.1:{failing.port}", am.signer, give_up_after_s=5)
    try:
        for _ in range(2):
            with pytest.raises(RequestRefused, match="424.*cannot read the src_dir archive: java.io.FileNotFound"):
                channel.download_src("worker:0", tmp_path / "none.zip")
    finally:
        failing.shutdown()
        failing.server_close()
