"""`tony logs` names why a NodeManager did not hand a log over, from what it answered (a local
HTTP server answers as a NodeManager would; 127.0.0.1 only)."""

import threading
from pathlib import Path
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tony_py import spnego
from tony_py.client import logs_cmd
from tony_py.client.logs_cmd import node_log_problem

SECURE_IO = ("<title>Error 500 javax.servlet.ServletException: java.lang.NoClassDefFoundError: "
             "Could not initialize class org.apache.hadoop.io.SecureIOUtils</title>")


@pytest.fixture
def node():
    answers = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status, body, *headers = answers["now"]
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", answers
    server.shutdown()
    server.server_close()


NEGOTIATE = (("WWW-Authenticate", "Negotiate"),)


@pytest.mark.parametrize("status,body,headers,expected", [
    (500, SECURE_IO, (), "needs Hadoop's native library (libhadoop.so)"),
    (500, "Exception reading log file. Application submitted by 'alice' doesn't own requested log file : stdout", (),
     "refuses to read it: under Kerberos a NodeManager reads a job's logs only if the job's owner (alice)"),
    (401, "Authentication required", NEGOTIATE, "asks for Kerberos (SPNEGO)"),
    (401, "Authentication required", (), "answered HTTP 401"),
    (403, "", (), "answered HTTP 403"),
    (503, "busy", (), "answered HTTP 503"),
    (404, "no such container", (), None),
    (200, "the log", (), None),
])
def test_what_the_nodemanager_answered_becomes_the_reason(node, status, body, headers, expected):
    url, answers = node
    answers["now"] = (status, body, *headers)
    problem = node_log_problem(spnego.session(), url, "container_1_0001_01_000002", "attempt-0.stdout")
    if expected is None:
        assert problem is None
    else:
        assert expected in problem and url in problem


def test_an_unreachable_node_is_said_to_be_unreachable():
    problem = node_log_problem(spnego.session(), "http://127.0.0.1:9", "container_1_0001_01_000002", "attempt-0.stdout")
    assert problem.startswith("the NodeManager at http://127.0.0.1:9 cannot be reached")


class AggregatingGateway:
    """The client gateway as `tony logs` uses it, for a job that ended and whose NodeManagers
    upload its logs after `uploads_after` looks (None: they never do, aggregation stays RUNNING)."""

    def __init__(self, uploads_after: int | None, aggregation_ends: str = "SUCCEEDED"):
        self.looks, self.uploads_after, self.aggregation_ends = 0, uploads_after, aggregation_ends
        self.bridge = self

    def json(self, _what, fn, *args):
        return fn(*args)

    call = json

    def report(self, _app_id):
        self.reports = getattr(self, "reports", 0) + 1
        uploaded = self.uploads_after is not None and self.looks > self.uploads_after
        return {"state": "FINISHED", "log_aggregation": self.aggregation_ends if uploaded else "RUNNING"}

    def fetchAggregatedLog(self, _app, _owner, _container, _name, local):
        self.looks += 1
        if self.uploads_after is not None and self.looks > self.uploads_after:
            Path(local).write_text("LogContents:\nthe log\nEnd of LogType:stdout\n")
            return True
        return False


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(logs_cmd, "FOLLOW_POLL_S", 0.001)
    monkeypatch.setattr(logs_cmd, "AGGREGATION_WAIT_S", 0.5)


def test_a_just_ended_jobs_log_is_read_once_its_nodes_uploaded_it(quick):
    gw = AggregatingGateway(uploads_after=3)
    assert logs_cmd.aggregated_when_done(gw, "app", "alice", "c", "stdout") == "the log\n"
    assert gw.looks == 4


def test_logs_that_never_come_are_waited_for_a_bounded_time_and_not_after_aggregation_ended(quick):
    never = AggregatingGateway(uploads_after=None)
    assert logs_cmd.aggregated_when_done(never, "app", "alice", "c", "stdout") is None
    assert never.looks > 3  # it waited, up to AGGREGATION_WAIT_S
    refused = AggregatingGateway(uploads_after=-1)  # aggregation over from the start, yet no file of this log
    refused.fetchAggregatedLog = lambda *args: False
    assert logs_cmd.aggregated_when_done(refused, "app", "alice", "c", "stdout") is None
    assert refused.reports == 1  # asked once, not waited for
