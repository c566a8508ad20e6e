"""`tony logs` names why a NodeManager did not hand a log over, from what it answered (a local
HTTP server answers as a NodeManager would; 127.0.0.1 only)."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tony_py import spnego
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
