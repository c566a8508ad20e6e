"""The AM server's route table (tony_py/am/http/server.py: ROUTES), for real on loopback: every
route is reached by its method and refuses the others, an executor's bad value is a signed 400
naming it, and what is not in the table is a 404 (or 405) as before."""

import json
import socket
import threading

import pytest

from harness import Harness
from tony_py.am.core import report
from tony_py.am.http import server as server_module
from tony_py.am.http.server import EXECUTOR, ROUTES, VIEWER, AmHttpServer, JobFiles
from tony_py.auth import Signer, UnsignedAnswer, Verifier, call_json, call_signed
from tony_py.net import wire

SECRET = "a1" * 32


@pytest.fixture
def am(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1")
    cid = h.allocate("worker")
    h.c.on_started(cid)

    def status(trusted):
        data = h.c.status(lambda t: "http://nm/logs")
        return data if trusted else report.public_view(data)

    srv = AmHttpServer(("127.0.0.1", 0), h.c, Verifier(SECRET), status,
                       job_files=JobFiles(b'{"spec": {}, "final_conf": ""}', None))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    srv.h, srv.cid, srv.url, srv.signer = h, cid, f"http://127.0.0.1:{srv.port}", Signer(SECRET, cid)
    yield srv
    srv.shutdown()
    srv.server_close()


def raw(port: int, method: str, target: str) -> tuple[int, bytes]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


def ids(am) -> dict:
    return {"task": "worker:0", "attempt": 0, "container": am.cid}


def valid_calls(am) -> dict[tuple[str, str], tuple]:
    """A request each route answers with its handler: (target, body, the statuses it may answer)."""
    i = ids(am)
    return {
        ("GET", "/status.json"): ("/status.json", None, {200}),
        ("GET", "/api/status"): ("/api/status", None, {200}),
        ("GET", "/"): ("/", None, {200}),
        ("GET", "/index.html"): ("/index.html", None, {200}),
        ("GET", "/v1/job"): ("/v1/job?task=worker:0", None, {200}),
        ("GET", "/v1/src"): ("/v1/src?task=worker:0", None, {404}),  # (this AM serves no src_dir: its handler says so)
        ("GET", "/v1/spec"): (wire.SpecPoll(**i, timeout=0).target(), None, {200, 204}),
        ("POST", "/v1/register"): ("/v1/register", wire.Register(**i, port=2000).to_body(), {200}),
        ("POST", "/v1/started"): ("/v1/started", wire.Started(**i, pid=7).to_body(), {200}),
        ("POST", "/v1/heartbeat"): ("/v1/heartbeat", wire.Heartbeat(**i).to_body(), {200}),
        ("POST", "/v1/callback"): ("/v1/callback", wire.Callback(**i, info={"a": 1}).to_body(), {200}),
        ("POST", "/v1/tensorboard"): ("/v1/tensorboard", wire.Tensorboard(**i, url="http://h:1").to_body(), {200}),
        ("POST", "/v1/result"): ("/v1/result", wire.Result(**i, exit_code=0).to_body(), {200}),
    }


def test_the_table_declares_each_executor_call_by_its_request_class():
    for cls in wire.EXECUTOR_CALLS:
        route = ROUTES[(cls.METHOD, cls.PATH)]
        assert route.caller == EXECUTOR and route.request is cls
    assert {r.caller for r in ROUTES.values() if not r.path.startswith("/v1/")} == {VIEWER}
    assert all(r.caller == EXECUTOR for r in ROUTES.values() if r.path.startswith("/v1/"))


def test_every_route_is_reached_signed_and_viewers_also_unsigned(am):
    calls = valid_calls(am)
    assert set(calls) == set(ROUTES)  # a route added to the table is added here
    for (method, path), (target, body, statuses) in calls.items():
        if method == "GET" and path == "/v1/src":
            status, answer = call_signed(am.signer, am.url, method, target, None, 10)
            assert status in statuses and b"does not serve the src_dir" in answer
            continue
        status, _ = call_signed(am.signer, am.url, method, target, body, 10)  # the answer is signed for it
        assert status in statuses, (method, path, status)
        if ROUTES[(method, path)].caller == VIEWER:
            assert raw(am.port, method, target)[0] == 200  # anyone: the public view
        else:
            assert raw(am.port, method, target)[0] == 401


def test_every_route_refuses_the_other_methods(am):
    for (method, path) in ROUTES:
        for other in ("GET", "POST", "PUT", "DELETE"):
            if (other, path) in ROUTES:
                continue
            status, body = raw(am.port, other, path)
            assert status == 405 and f"{other} is not allowed" in json.loads(body)["error"], (other, path)


def test_what_is_not_in_the_table(am):
    assert raw(am.port, "GET", "/nowhere") == (404, b'{"error": "not found"}')
    assert raw(am.port, "POST", "/nowhere")[0] == 404
    assert raw(am.port, "POST", "/v1/nowhere")[0] == 401  # unsigned
    status, answer = call_json(am.signer, am.url, "POST", "/v1/nowhere", ids(am), 5)
    assert status == 404 and answer == {"error": "not found"}  # signed: an executor takes it as final


@pytest.mark.parametrize("path,extra,field", [
    ("/v1/register", {"port": 0}, "port"),
    ("/v1/register", {"port": 2000, "gpus": ["a/b"]}, "gpus"),
    ("/v1/started", {"pid": -1}, "pid"),
    ("/v1/heartbeat", {"metrics": {"rss": "lots"}}, "rss"),
    ("/v1/heartbeat", {"progress_age_s": "old"}, "progress_age_s"),
    ("/v1/callback", {"info": [1]}, "info"),
    ("/v1/tensorboard", {"url": "file:///etc/passwd"}, "url"),
    ("/v1/result", {"signal": "S" * 41}, "signal"),
    ("/v1/result", {"error": {"traceback": 1}}, "traceback"),
    ("/v1/result", {"attempt": 1 << 21}, "attempt"),
    ("/v1/result", {"task": None}, "task"),
])
def test_a_bad_field_is_a_signed_400_naming_it(am, path, extra, field):
    body = {k: v for k, v in {**ids(am), **extra}.items() if v is not None}
    status, answer = call_json(am.signer, am.url, "POST", path, body, 5)  # (call_json checked the signature)
    assert status == 400 and answer["error"].startswith("bad request: ") and field in answer["error"]


def test_a_spec_poll_with_a_bad_value_is_a_signed_400_naming_it(am):
    status, answer = call_json(am.signer, am.url, "GET", "/v1/spec?task=worker:0&attempt=1.5", None, 5)
    assert status == 400 and "attempt" in answer["error"]


def test_an_unsigned_request_with_a_bad_value_is_a_401_not_a_400(am):
    with socket.create_connection(("127.0.0.1", am.port), timeout=10) as s:
        s.sendall(b"POST /v1/register HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n[]")
        assert s.recv(100).startswith(b"HTTP/1.1 401")


def test_while_the_rm_is_lost_every_executor_route_answers_503(am):
    am.h.c.lose_rm("the ResourceManager is gone")
    for (method, path), (target, body, _) in valid_calls(am).items():
        if path.startswith("/v1/"):
            with pytest.raises(UnsignedAnswer) as refused:
                call_json(am.signer, am.url, method, target, body, 5)
            assert refused.value.status == 503
    assert call_json(am.signer, am.url, "GET", "/status.json", None, 5)[0] == 200


def test_the_long_poll_limit_is_the_wires():
    assert server_module.MAX_LONG_POLL_S == wire.MAX_LONG_POLL_S
