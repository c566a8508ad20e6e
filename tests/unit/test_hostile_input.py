"""The servers against a hostile tenant: what one socket, or a few dozen, can make the AM's
HTTP server and an executor's control endpoint do, and what another user of a shared gateway
host can get from `tony portal`. Every test measures the harm (bytes the AM buffers, 503s,
seconds blocked, status codes) on 127.0.0.1 only, with short limits, and stops by itself."""

import asyncio
import http.client
import json
import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import Harness, wait_until
from tony_py.am.http import dashboard
from tony_py.am.core import report
from tony_py.am.http import server as server_module
from tony_py.am.http.server import AmHttpServer
from tony_py.auth import Signer, UnsignedAnswer, Verifier, call_json
from tony_py.client.portal import Portal, make_server
from tony_py.executor import control as control_module
from tony_py.executor.control import ControlServer
from tony_py.net import admission, httpd

SECRET = "a1" * 32


def start_am(tmp_path, max_connections=66):
    """An AM server of a one-task job (2 per task + 64 connections, as the AM sizes it)."""
    h = Harness(tmp_path, "tony.worker.instances=1")
    cid = h.allocate("worker")
    h.c.on_started(cid)
    calls = []

    def status(trusted):
        calls.append(trusted)
        data = h.c.status(lambda t: "http://nm/logs")
        return data if trusted else report.public_view(data)

    srv = AmHttpServer(("127.0.0.1", 0), h.c, Verifier(SECRET), status, max_connections=max_connections)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.calls, srv.url, srv.signer = calls, f"http://127.0.0.1:{srv.port}", Signer(SECRET, cid)
    return srv


@pytest.fixture
def am(tmp_path):
    srv = start_am(tmp_path)
    yield srv
    srv.shutdown()
    srv.server_close()


def on_loop(srv, fn):
    """fn() run on the server's event loop (its connections are the loop's to read)."""
    async def call():
        return fn()
    return asyncio.run_coroutine_threadsafe(call(), srv.http.loop).result(5)


def buffered(srv) -> int:
    """Bytes the AM holds for clients that have not read them (lingering connections too)."""
    return on_loop(srv, lambda: sum(c.transport.get_write_buffer_size() for c in srv.http.connections
                                    if c.transport is not None))


def signed_request(signer, method, target, body=b"", receiver="") -> bytes:
    headers, _ = signer.sign(method, target, body, receiver)
    head = f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n"
    return (head + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n").encode() + body


def signed_codes(am, n: int) -> list[int]:
    """The statuses of n signed status requests, each on a new connection (503s included)."""
    codes = []
    for _ in range(n):
        try:
            codes.append(call_json(am.signer, am.url, "GET", "/status.json", None, 5)[0])
        except UnsignedAnswer as exc:
            codes.append(exc.status)
    return codes


def connect(port, source="127.0.0.1", timeout=2.0) -> socket.socket:
    """A connection from `source` (any 127.x.y.z: a peer address of its own)."""
    return socket.create_connection(("127.0.0.1", port), timeout=timeout, source_address=(source, 0))


def ended(s) -> bool:
    """The server answered 503 on s or closed it."""
    s.settimeout(0.01)
    try:
        data = s.recv(100)
    except socket.timeout:
        return False
    except ConnectionResetError:
        return True
    return data == b"" or data.startswith(b"HTTP/1.1 503")


def pipeline_without_reading(port, requests, seconds=2.0) -> tuple[socket.socket, int]:
    """Send requests back to back on one socket that reads nothing; stop when the server
    stops taking them (or after `seconds`). Returns the socket and how many went out."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # the kernel holds little for us
    s.connect(("127.0.0.1", port))
    s.settimeout(0.2)
    sent, until = 0, time.monotonic() + seconds
    for request in requests:
        if time.monotonic() > until:
            break
        try:
            s.sendall(request)
        except (socket.timeout, OSError):
            break
        sent += 1
    return s, sent


def read_answers(s, timeout=10.0, expect: int | None = None) -> list[bytes]:
    """Status lines of the answers on s until the server closes it, goes quiet for `timeout`
    or has sent `expect` of them."""
    s.settimeout(timeout)
    data, found = b"", []
    try:
        while expect is None or len(found) < expect:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            found = re.findall(rb"HTTP/1\.1 \d{3} [A-Za-z ]*", data)  # (a body does not end its line)
    except (socket.timeout, ConnectionResetError):
        pass
    return found


# ---- pipelined requests (issue 18, item 1) -------------------------------------------------------
def test_unsigned_pipelining_gets_one_answer_and_the_am_buffers_at_most_that(am):
    """3,000 pipelined GET / from a socket that never reads grew the AM's write buffer to
    ~20 MB (measured before the fix): now the first one is answered and the connection closes."""
    s, sent = pipeline_without_reading(am.port, [b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"] * 3000)
    try:
        # the AM answered the first and is closing: what it holds now is all it will hold
        assert sent > 0 and wait_until(lambda: on_loop(am, lambda: [c.closing for c in am.http.connections]) == [True])
        assert buffered(am) < 128 << 10, (sent, buffered(am))
        assert len(read_answers(s, timeout=10)) == 1
    finally:
        s.close()


def test_signed_pipelining_is_paused_while_the_client_does_not_read(am):
    """Back-pressure: above the high-water mark the AM stops parsing (and reading), and goes on
    once the client reads; every request is answered in order."""
    requests = [signed_request(am.signer, "GET", "/", receiver=am.verifier.receiver) for _ in range(150)]
    s, sent = pipeline_without_reading(am.port, requests)
    try:
        # the AM stopped parsing: paused once the answers piled up (or, had the kernel's buffers
        # taken them all, done with every request); either way it holds no more than that
        def settled():
            return on_loop(am, lambda: [c.write_paused or (not c.busy and not c.buffer) for c in am.http.connections])

        assert sent > 0 and wait_until(lambda: settled() == [True])
        held = buffered(am)
        assert held < 256 << 10, held  # without back-pressure: ~30 KB per page, all of them
        answers = read_answers(s, timeout=10, expect=sent)
        assert len(answers) == sent and all(a.startswith(b"HTTP/1.1 200") for a in answers)
    finally:
        s.close()


def test_the_public_page_is_built_at_most_about_once_a_second(am):
    started = time.monotonic()
    for _ in range(20):
        with connect(am.port) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            assert read_answers(s)[0].startswith(b"HTTP/1.1 200")
    took = time.monotonic() - started  # (well under a second, unless the machine is very busy)
    assert am.calls.count(False) <= 1 + took / server_module.PUBLIC_CACHE_S
    status, answer = call_json(am.signer, am.url, "GET", "/status.json", None, 5)
    assert status == 200 and "diagnostics" in answer  # signed: fresh and full, never the cached view


def test_a_slow_reader_still_gets_a_large_unsigned_answer_whole(monkeypatch):
    """Closing after an unsigned answer must not cut one the socket could not take at once."""
    monkeypatch.setattr(httpd, "LINGER_S", 0.2)
    big = {"pad": "x" * (3 << 20)}
    srv = AmHttpServer(("127.0.0.1", 0), None, Verifier(SECRET), lambda trusted: big)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", srv.port))
        with s:
            s.sendall(b"GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n")
            time.sleep(0.5)  # longer than the linger after an answer
            s.settimeout(5)
            data = b""
            while chunk := s.recv(1 << 20):
                data += chunk
        assert json.loads(data.split(b"\r\n\r\n", 1)[1]) == big
    finally:
        srv.shutdown()
        srv.server_close()


# ---- sockets held open (item 2) ------------------------------------------------------------------
def test_unsigned_answers_close_so_idle_sockets_cannot_fill_the_cap(am):
    """66 sockets that each sent one unsigned GET /status.json held the whole cap of a
    one-task job for 120 s; signed heartbeats then got 503 (5 of 5, before the fix)."""
    socks = []
    try:
        for i in range(66):
            s = connect(am.port, source=f"127.0.0.{2 + i % 8}")
            s.sendall(b"GET /status.json HTTP/1.1\r\nHost: x\r\n\r\n")
            socks.append(s)
        answers = [read_answers(s, timeout=10) for s in socks]  # each: one answer, then EOF
        assert all(len(a) == 1 for a in answers)
        assert sum(a == [b"HTTP/1.1 200 OK"] for a in answers) >= 40  # the rest: 503, the per-address limit
        assert signed_codes(am, 5) == [200] * 5
    finally:
        for s in socks:
            s.close()


def test_silent_sockets_cannot_lock_out_a_signed_newcomer(am, monkeypatch):
    """Silent sockets from many addresses fill what unproven connections may hold (renewing
    them every 5 s would hold it for good): a signed request still gets in, the oldest silent
    socket giving way; and one address holds no more than its share."""
    monkeypatch.setattr(admission, "GRACE_S", 0.1)
    socks = []
    try:
        socks += [connect(am.port, source=f"127.0.0.{2 + i % 8}") for i in range(80)]  # more than the cap
        time.sleep(0.2)
        assert signed_codes(am, 5) == [200] * 5
        slots = am.http.admission
        assert on_loop(am, lambda: len(slots.unproven)) <= am.http.max_connections - slots.reserved
        one = [connect(am.port, source="127.0.0.20") for _ in range(40)]
        socks += one
        done: set[int] = set()  # refused (503), or displaced: the surplus, as the server gets to it

        def surplus_ended():
            done.update(i for i, s in enumerate(one) if i not in done and ended(s))
            return len(done) >= 40 - slots.per_peer

        assert wait_until(surplus_ended), len(done)
        assert on_loop(am, lambda: len(slots.by_peer.get("127.0.0.20", ()))) <= slots.per_peer
    finally:
        for s in socks:
            s.close()


def test_a_proven_connection_is_never_displaced(am, monkeypatch):
    monkeypatch.setattr(admission, "GRACE_S", 0.0)
    with connect(am.port) as executor:
        executor.sendall(signed_request(am.signer, "GET", "/status.json", receiver=am.verifier.receiver))
        assert read_answers(executor, expect=1) == [b"HTTP/1.1 200 OK"]
        flood = [connect(am.port, source=f"127.0.0.{2 + i % 8}") for i in range(100)]
        try:
            # the same socket
            executor.sendall(signed_request(am.signer, "GET", "/status.json", receiver=am.verifier.receiver))
            assert read_answers(executor, expect=1) == [b"HTTP/1.1 200 OK"]
        finally:
            for s in flood:
                s.close()


class Conn:
    """A connection as admission sees it."""

    def __init__(self, peer, opened=0.0):
        self.peer, self.opened, self.busy, self.closing, self.displaced = peer, opened, False, False, False

    def displaceable(self, now, grace_s):
        return self.closing or (not self.busy and now - self.opened >= grace_s)

    def displace(self):
        self.displaced = True


def test_admission_shares_per_address_limit_and_the_ams_own_address():
    slots = admission.Admission(64, own_address="10.0.0.1")  # 16 reserved, 24 per address
    stranger = [Conn("10.0.0.9") for _ in range(25)]
    assert [slots.admit(c, now=0.1) for c in stranger] == [True] * 24 + [False]  # all young: none gives way
    stranger.append(Conn("10.0.0.9"))
    assert slots.admit(stranger[-1], now=5.0) and stranger[0].displaced  # the oldest silent one does
    local = [Conn("10.0.0.1", opened=5.0) for _ in range(24)]  # the AM's node: no per-address limit
    assert all(slots.admit(c, now=5.0) for c in local)
    for c in stranger:
        c.busy = True  # being answered: not displaced
    assert not slots.admit(Conn("10.0.0.2"), now=5.0)  # 48 unproven: their share is full
    for c in local:
        slots.prove(c)  # signed: they keep their slots, reserved ones included
    assert slots.admit(Conn("10.0.0.2"), now=5.0)
    assert not any(c.displaced for c in local)


# ---- parse errors before authentication (item 4) -------------------------------------------------
@pytest.mark.parametrize("length", ["\u00b2", "1\u00b9", "9" * 5000, "+5", "0x10", ""])
def test_odd_content_lengths_are_a_clean_400(am, length):
    """A header is latin-1: the byte 0xB2 is '²', which str.isdigit() accepts and int() does not."""
    with connect(am.port) as s:
        s.sendall(f"POST /v1/register HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode("latin-1"))
        assert read_answers(s)[:1] == [b"HTTP/1.1 400 Bad Request"]


def test_thousands_of_pipelined_requests_do_not_recurse(am):
    """2,000 pipelined 404s went three stack frames deeper each: RecursionError, connection gone.
    Signed ones (refused as bad requests) keep the connection: every one is answered."""
    requests = b"".join(signed_request(am.signer, "POST", "/v1/heartbeat", b"{}", am.verifier.receiver)
                        for _ in range(2000))
    with connect(am.port, timeout=5) as s:
        threading.Thread(target=s.sendall, args=(requests,), daemon=True).start()
        s.settimeout(5)
        data, count = b"", 0
        while count < 2000:
            chunk = s.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            count = data.count(b"HTTP/1.1 400")
        assert count == 2000


def test_a_deeply_nested_signed_body_is_a_400(am):
    body = b"[" * 100_000 + b"]" * 100_000
    with connect(am.port) as s:
        s.sendall(signed_request(am.signer, "POST", "/v1/heartbeat", body, am.verifier.receiver))
        assert read_answers(s, expect=1) == [b"HTTP/1.1 400 Bad Request"]


# ---- the executor's control endpoint (item 3) ----------------------------------------------------
@pytest.fixture
def control(monkeypatch):
    monkeypatch.setattr(control_module, "REQUEST_S", 0.5, raising=False)
    channel = SimpleNamespace(base_url="http://old-am:1")
    ctl = ControlServer("127.0.0.1", Verifier(SECRET), channel)
    ctl.channel, ctl.url = channel, f"http://127.0.0.1:{ctl.port}"
    yield ctl
    ctl.httpd.shutdown()
    ctl.httpd.server_close()


def trickle(socks, every_s, stop: threading.Event):
    """A byte every every_s on each socket until stop is set: a request that never ends."""
    def run():
        for s in socks:
            s.sendall(b"POST /v1/am HTTP/1.1\r\n")
        while not stop.wait(every_s):
            for s in socks:
                try:
                    s.sendall(b"X")
                except OSError:
                    pass
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_trickling_sockets_cannot_keep_the_new_am_out(control, monkeypatch):
    """8 sockets sending a byte every 3 s blocked every AM fail-over notification for as long
    as they went on (a 5 s timeout per read, 8 slots). With the request deadline far off (30 s),
    the notification still gets in while they trickle: the last slot's holder gives way."""
    monkeypatch.setattr(control.httpd, "request_timeout_s", 30.0)
    signer = Signer(SECRET, "appattempt_2")
    socks = [connect(control.port) for _ in range(12)]
    stop = threading.Event()
    trickler = trickle(socks, every_s=0.1, stop=stop)
    try:
        status, _ = call_json(signer, control.url, "POST", "/v1/am", {"url": "http://new-am:2"}, timeout=10)
        assert status == 200 and trickler.is_alive()  # the AM's notification got in, they still trickle
        assert control.channel.base_url == "http://new-am:2"
    finally:
        stop.set()
        trickler.join()
        for s in socks:
            s.close()


def test_trickling_sockets_end_at_the_request_deadline(control):
    """Each request must arrive whole within REQUEST_S (0.5 s here) of its connect, however
    often bytes come: the server closes the trickling ones while they still send."""
    socks = [connect(control.port) for _ in range(6)]
    stop = threading.Event()
    trickler = trickle(socks, every_s=0.1, stop=stop)
    try:
        for s in socks:
            s.settimeout(30)  # a close is the event; a per-read timeout would never come
            try:
                assert s.recv(100) == b""
            except ConnectionResetError:
                pass
        assert trickler.is_alive()
    finally:
        stop.set()
        trickler.join()
        for s in socks:
            s.close()


def test_control_answers_one_request_per_connection_and_refuses_odd_bodies(control):
    signer = Signer(SECRET, "appattempt_2")
    with connect(control.port) as s:  # a 401 closes the connection: nothing more is read
        s.sendall(b"POST /v1/am HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}" * 3)
        assert read_answers(s) == [b"HTTP/1.1 401 Unauthorized"]
    for length in ("\u00b2", "9" * 5000):
        with connect(control.port) as s:
            s.sendall(f"POST /v1/am HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n\r\n".encode("latin-1"))
            assert read_answers(s) == [b"HTTP/1.1 400 Bad Request"]
    with connect(control.port) as s:
        s.sendall(signed_request(signer, "POST", "/v1/am", b"[" * 2000 + b"]" * 2000, control.verifier.receiver))
        assert read_answers(s) == [b"HTTP/1.1 400 Bad Request"]


def test_control_answers_a_signed_request_and_closes_even_so(control):
    """On the AM's HTTP server, whose signed connections stay open: not this one's."""
    signer = Signer(SECRET, "appattempt_2")
    body = json.dumps({"url": "http://new-am:3"}).encode()
    with connect(control.port) as s:
        s.sendall(
            signed_request(signer, "POST", "/v1/am", body, control.verifier.receiver)
            + signed_request(signer, "POST", "/v1/am", body, control.verifier.receiver)
        )
        assert read_answers(s) == [b"HTTP/1.1 200 OK"]
    assert control.channel.base_url == "http://new-am:3"


def test_control_counts_the_request_deadline_from_the_connect(control):
    """A socket silent for most of REQUEST_S (0.5 s here) does not get another REQUEST_S from its
    first byte: the whole request must have come by the deadline, or it is closed unanswered."""
    signer = Signer(SECRET, "appattempt_2")
    request = signed_request(signer, "POST", "/v1/am", b'{"url": "http://late:1"}', control.verifier.receiver)
    with connect(control.port) as s:
        time.sleep(0.3)
        s.sendall(request[:10])
        time.sleep(0.6)  # 0.9 s after the connect: past the deadline (and the sweep after it)
        try:
            s.sendall(request[10:])
        except OSError:
            pass
        assert read_answers(s) == []
    assert control.channel.base_url == "http://old-am:1"


def test_a_notification_sent_before_the_control_server_runs_is_answered_once_it_does():
    """The executor binds the port at once and starts the server later (START_AFTER_S): what the
    AM sends meanwhile waits in the accept queue."""
    channel = SimpleNamespace(base_url="http://old-am:1")
    ctl = ControlServer("127.0.0.1", Verifier(SECRET), channel, start_after_s=0.5)
    try:
        sent = time.monotonic()
        status, _ = call_json(
            Signer(SECRET, "appattempt_2"),
            f"http://127.0.0.1:{ctl.port}",
            "POST",
            "/v1/am",
            {"url": "http://new-am:2"},
            timeout=10,
        )
        assert status == 200 and channel.base_url == "http://new-am:2"
        assert time.monotonic() - sent >= 0.4  # (it was not served before its time)
    finally:
        ctl.httpd.shutdown()
        ctl.httpd.server_close()


def test_the_control_endpoints_last_slot_goes_to_the_newest_until_a_signed_request_keeps_it():
    slots = admission.LastSlot(4)
    shared = [Conn("10.0.0.9") for _ in range(3)]
    assert all(slots.admit(c, now=0.0) for c in shared)  # anyone's, first come, never displaced
    first, second, am = Conn("10.0.0.9"), Conn("10.0.0.9"), Conn("10.0.0.1")
    assert slots.admit(first, now=0.0) and slots.kept is first
    assert slots.admit(second, now=0.0) and first.displaced and slots.kept is second
    assert slots.admit(am, now=0.0) and second.displaced  # the AM's notification always gets in
    slots.prove(am)  # its signature checked: no newcomer takes its slot now
    assert not slots.admit(Conn("10.0.0.9"), now=0.0) and not am.displaced
    slots.release(am)
    assert slots.admit(Conn("10.0.0.9"), now=0.0)
    assert not any(c.displaced for c in shared)
    slots.release(shared[0])
    newcomer = Conn("10.0.0.9")
    assert slots.admit(newcomer, now=0.0) and newcomer in slots.shared


# ---- the portal on a shared gateway host, the pages' links (item 8) ------------------------------
class Store:
    """The history the portal reads (HistoryStore's calls it makes)."""

    finished_root = "hdfs:///tony-history/finished"

    def __init__(self, jobs, config):
        self.jobs, self.conf = jobs, config

    def summaries(self):
        return self.jobs

    def purge(self, retention_s):
        return []

    def events(self, job):
        return []

    def config(self, job):
        return self.conf


@pytest.fixture
def portal():
    tasks = [{"name": "worker:0", "state": "FAILED", "log_url": "javascript:alert(2)//"},
             {"name": "worker:1", "state": "SUCCEEDED", "log_url": "http://nm:8042/node/containerlogs/c2/alice"}]
    advice = [{"heuristic": "memory", "severity": "critical", "task_type": "worker", "waste": 2.0, "waste_unit": "GB-hours",
               "evidence": "</li><script>alert(3)</script>", "suggestion": {"key": "tony.worker.memory", "value": "1g"}}]
    jobs = [{"app_id": "application_1_0001", "name": "j", "user": "alice", "final_status": "FAILED",
             "am_log_url": "javascript:alert(1)", "tasks": tasks, "advice": advice, "waste": {"GB-hours": 2.0}},
            {"app_id": "application_1_0002", "name": "k", "user": "bob", "final_status": "SUCCEEDED", "tasks": [],
             "waste": {"GPU-hours": 0.5}}]
    config = {"tony.execution.envs": "API_KEY=s3cr3t,B=2", "tony.containers.envs": "X=hunter2",
              "tony.worker.instances": "2"}
    server = make_server(Portal(Store(jobs, config)), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


def portal_get(server, path, host=None) -> tuple[int, dict, str]:
    port = server.server_address[1]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", path, headers={"Host": host or f"127.0.0.1:{port}"})
        resp = conn.getresponse()
        return resp.status, dict(resp.getheaders()), resp.read().decode()
    finally:
        conn.close()


def test_the_portal_answers_only_the_url_it_printed(portal):
    """127.0.0.1 on a shared gateway is every user's: without the token nothing is served, and
    a request for another Host name (DNS rebinding) neither."""
    assert portal_get(portal, "/")[0] == 403
    assert portal_get(portal, "/jobs/application_1_0001/config")[0] == 403
    token = portal.token
    assert portal_get(portal, "/" + "x" * len(token) + "/")[0] == 403
    status, headers, page = portal_get(portal, f"/{token}/")
    assert status == 200 and "application_1_0001" in page and headers["Referrer-Policy"] == "no-referrer"
    status, headers, _ = portal_get(portal, f"/{token}")
    assert status == 301 and headers["Location"] == f"/{token}/"
    assert portal_get(portal, f"/{token}/", host=f"rebound.example:{portal.server_address[1]}")[0] == 403


def test_the_portal_shows_the_jobs_advice_escaped_and_lists_the_most_wasteful_first(portal):
    prefix = f"/{portal.token}"
    _, _, job = portal_get(portal, f"{prefix}/jobs/application_1_0001")
    assert "<code>--conf tony.worker.memory=1g</code>" in job and "<script>alert(3)" not in job
    _, _, listing = portal_get(portal, f"{prefix}/?sort=waste")
    # half a GPU-hour weighs more than 2 GB-hours (model.COST_PER_HOUR): bob's job first
    assert listing.index("application_1_0002") < listing.index("application_1_0001") and "0.5 GPU-hours" in listing
    _, _, plain = portal_get(portal, f"{prefix}/")
    assert plain.index("application_1_0001") < plain.index("application_1_0002")  # the history's own order


def test_the_portal_masks_env_values_and_links_only_to_http(portal):
    prefix = f"/{getattr(portal, 'token', '')}"  # (none before the portal had one)
    _, _, config = portal_get(portal, f"{prefix}/jobs/application_1_0001/config")
    assert "API_KEY=***,B=***" in config and "X=***" in config and "tony.worker.instances" in config
    assert "s3cr3t" not in config and "hunter2" not in config
    _, _, job = portal_get(portal, f"{prefix}/jobs/application_1_0001")
    assert "javascript:" not in job and "href='http://nm:8042/node/containerlogs/c2/alice/attempt-0.stdout" in job


def test_the_dashboards_embedded_status_cannot_end_its_script():
    status = {"app_id": "application_1_0001", "state": "RUNNING",
              "tasks": [{"name": "worker:0", "stderr_tail": "</script><script>alert(1)</script><!--"}]}
    page = dashboard.render(status).decode()
    data = page.split("<script type='application/json' id='data'>", 1)[1].split("</script>", 1)[0]
    assert "<" not in data and json.loads(data) == status


def test_a_displaced_request_leaves_no_traceback_in_the_executor_log(control, capfd, monkeypatch):
    """What a stranger's socket makes happen is not worth a traceback in executor.log."""
    monkeypatch.setattr(control.httpd, "request_timeout_s", 30.0)  # the silent ones keep their slots meanwhile
    threads = threading.active_count()
    socks = [connect(control.port) for _ in range(control_module.MAX_CONNECTIONS - 1)]
    try:
        half = connect(control.port)  # the slot kept for a signed request: it gives way
        socks.append(half)
        half.sendall(b"POST /v1/am HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
        assert wait_until(lambda: control.httpd.admission.kept is not None)  # it holds the kept slot
        socks.append(connect(control.port))
        half.settimeout(30)
        try:  # cut off: the newcomer has its slot
            assert half.recv(100) == b""
        except ConnectionResetError:
            pass
    finally:
        for s in socks:
            s.close()
    # every request's thread has ended, the displaced one's included: whatever it printed is in
    assert wait_until(lambda: threading.active_count() <= threads)
    assert "Traceback" not in capfd.readouterr().err


# ---- signed messages: bound to their receiver and their time, checked before they are believed -----------
def test_a_request_signed_for_one_receiver_means_nothing_to_another(am, tmp_path):
    """A notification captured on its way to one executor's control endpoint, or a heartbeat to
    one AM attempt, replayed at another: refused there (the signature covers host:port)."""
    other = start_am(tmp_path / "other")
    try:
        body = json.dumps({"task": "worker:0", "attempt": 0, "container": "x"}).encode()
        captured = signed_request(am.signer, "POST", "/v1/heartbeat", body, am.verifier.receiver)
        with connect(other.port) as s:
            s.sendall(captured)
            assert read_answers(s) == [b"HTTP/1.1 401 Unauthorized"]
        with connect(am.port) as s:  # where it was meant to go, it is good
            s.sendall(captured)
            assert read_answers(s, expect=1) == [b"HTTP/1.1 200 OK"]
    finally:
        other.shutdown()
        other.server_close()


def test_a_clock_an_hour_ahead_is_refused_with_a_reason_and_locks_no_one_out(am):
    ahead = Signer(SECRET, "client-shared")
    ahead._last = time.time_ns() + 3600 * 10**9  # its sequence numbers: its clock, an hour fast
    body = json.dumps({"task": "worker:0", "attempt": 0, "container": "x"}).encode()
    headers, nonce = ahead.sign("POST", "/v1/heartbeat", body, am.verifier.receiver)
    conn = http.client.HTTPConnection("127.0.0.1", am.port, timeout=5)
    conn.request("POST", "/v1/heartbeat", body=body, headers=headers)
    resp = conn.getresponse()
    raw = resp.read()
    assert resp.status == 401 and b"clock" in raw
    ahead.check_answer(nonce, 401, raw, resp.getheader("X-Tony-Signature"))  # signed: ours, so it says why
    # the principal is not poisoned: a sender with a right clock is served under the same name
    assert call_json(Signer(SECRET, "client-shared"), am.url, "GET", "/status.json", None, 5)[0] == 200


def test_an_old_captured_request_has_expired():
    verifier = Verifier(SECRET, receiver="am:1", clock=lambda: time.time() + 301)
    headers, _ = Signer(SECRET, "c1").sign("POST", "/v1/result", b"{}", "am:1")
    with pytest.raises(Exception, match="clock"):
        verifier.check("POST", "/v1/result", b"{}", headers["X-Tony-Auth"])


def test_every_client_signs_under_a_name_of_its_own():
    from tony_py.auth import client_principal

    assert len({client_principal() for _ in range(100)}) == 100


def test_an_answer_is_not_believed_before_its_signature_and_is_read_only_so_far(tmp_path):
    """A stranger on the AM's port: a non-ASCII signature header (compare_digest would raise), an
    unsigned 413 (an executor that obeyed it would kill its task), a 48 MB answer (read whole
    before the check, it cost 48 MB)."""
    import http.server

    class Stranger(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            if self.path == "/v1/result":
                self.send_response(413)
                self.send_header("Content-Length", "2")
                self.send_header("X-Tony-Signature", "é" * 64)
                self.end_headers()
                self.wfile.write(b"{}")
            else:
                self.send_response(200)
                self.send_header("Content-Length", str(48 << 20))
                self.end_headers()
                try:
                    self.wfile.write(b"x" * (48 << 20))
                except OSError:
                    pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Stranger)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    from tony_py.executor.channel import AmChannel, AmUnreachable

    try:
        channel = AmChannel(f"http://127.0.0.1:{server.server_address[1]}", Signer(SECRET, "c1"), give_up_after_s=0.5)
        with pytest.raises(AmUnreachable, match="413"):  # retried, never acted on, no TypeError
            channel.post("/v1/result", {"exit_code": 1})
        with pytest.raises(AmUnreachable, match="more than the"):  # refused by its size, unread
            channel.post("/v1/heartbeat", {})
    finally:
        server.shutdown()
        server.server_close()


# ---- what other users can read -----------------------------------------------------------------------
def test_yarn_gets_no_stderr_and_no_traceback_by_default(tmp_path):
    """YARN's diagnostics are readable by every user of a cluster without ACLs: the verdict and
    the root cause go there, the root cause's stderr tail and traceback only to the owner."""
    h = Harness(tmp_path, "tony.worker.instances=1")
    h.bring_up()
    h.result("worker:0", code=3, stderr="Traceback...\nValueError: password=hunter2")
    public, private = h.c.diagnostics(details=False), h.c.diagnostics()
    assert "exit code 3" in public and "hunter2" not in public and "tony logs" in public
    assert "hunter2" in private


@pytest.mark.parametrize("cookie,acls,enforced,detail", [
    ("proxy-user=alice", (), True, True),  # ACLs enforced: the job's owner
    ("proxy-user=mallory", (), True, False),  # ... and nobody else
    (None, (), True, False),  # ... nor a proxy that names nobody
    ("proxy-user=bob", ("bob",), True, True),  # tony.application.view-acls
    ("proxy-user=mallory", ("*",), True, True),
    ("proxy-user=dr.who", (), False, True),  # no ACLs: YARN shows every job to everyone, so do we
    (None, (), False, True),
])
def test_through_the_proxy_detail_goes_to_the_owner_and_the_view_acls(tmp_path, cookie, acls, enforced, detail):
    h = Harness(tmp_path, "tony.worker.instances=1")
    h.bring_up()
    h.result("worker:0", code=3, stderr="secret stderr")
    srv = AmHttpServer(("127.0.0.1", 0), h.c, Verifier(SECRET),
                       lambda trusted: h.c.status() if trusted else report.public_view(h.c.status()),
                       trusted_addresses=frozenset({"127.0.0.1"}),
                       proxy_viewer=report.proxy_viewers("alice", acls, enforced))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=5)  # from the proxy's address
        conn.request("GET", "/status.json", headers={"Cookie": cookie} if cookie else {})
        status = json.loads(conn.getresponse().read())
        assert ("secret stderr" in json.dumps(status)) == detail
    finally:
        srv.shutdown()
        srv.server_close()


def test_horovods_rendezvous_listens_on_the_nodes_address_not_every_address(monkeypatch):
    """Horovod's own RendezvousServer.start binds every address; the driver binds the node's.
    (Horovod is not installed here: its two classes the driver uses stand in, with its API.)"""
    import sys
    import types
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from tony_py.frameworks import horovod_driver

    bound = []

    class RendezvousHTTPServer(HTTPServer):
        def __init__(self, addr, handler, verbose):
            bound.append(addr)
            super().__init__(addr, handler)

        def init(self, plan):
            self.plan = plan

    http_server = types.SimpleNamespace(RendezvousHTTPServer=RendezvousHTTPServer,
                                        RendezvousHandler=BaseHTTPRequestHandler)
    hosts = types.SimpleNamespace(parse_hosts=lambda s: [types.SimpleNamespace(slots=1) for _ in s.split(",")],
                                  get_host_assignments=lambda hs, n: ["plan"] * n)
    for name, module in {"horovod": types.SimpleNamespace(), "horovod.runner": types.SimpleNamespace(),
                         "horovod.runner.http": types.SimpleNamespace(), "horovod.runner.http.http_server": http_server,
                         "horovod.runner.common": types.SimpleNamespace(),
                         "horovod.runner.common.util": types.SimpleNamespace(),
                         "horovod.runner.common.util.hosts": hosts}.items():
        monkeypatch.setitem(sys.modules, name, module)
    port = horovod_driver.rendezvous("127.0.0.1", "h1:1,h2:1")
    assert bound == [("127.0.0.1", 0)] and port > 0
    # the real socket: it takes connections on the node's address, and on no other
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        pass
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("127.0.0.2", port), timeout=10)


def test_the_kernels_accept_queue_is_the_one_sized_for_the_gang_once_serving(tmp_path):
    """asyncio's create_server listens again with its own backlog (100 unless given one): the
    queue a 10,000-executor gang connects into is the server's, as `ss -ltn` shows it (Send-Q of
    a listening socket: its backlog, capped by net.core.somaxconn)."""
    srv = start_am(tmp_path, max_connections=3000)
    try:
        assert srv.http._serving.wait(10)
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{srv.port}"], capture_output=True, text=True,
                                   check=True).stdout.split()
        cap = int(Path("/proc/sys/net/core/somaxconn").read_text())
        assert srv.http.backlog == 3000 and int(listening[2]) == min(3000, cap), listening
    finally:
        srv.shutdown()
        srv.server_close()
