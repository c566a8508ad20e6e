"""tony_py/spnego.py's decisions without a KDC: when a server asks for Kerberos, what the user is
told, and which cookies go where (a local HTTP server answers as a daemon would; 127.0.0.1 only).
The exchange itself runs against real daemons in tests/integration/secure/test_web_ui.py."""

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from tony_py import spnego


@pytest.fixture
def servers():
    """Two servers on 127.0.0.1: a 'daemon' that wants Negotiate unless sent its own cookie, and
    one that sets a cookie of its own. Each records the Cookie headers it got."""
    seen = {"negotiate": [], "plain": []}

    def handler(kind):
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                seen[kind].append(self.headers.get("Cookie"))
                if kind == "negotiate" and self.headers.get("Cookie") != "hadoop.auth=mine":
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", "Negotiate")
                else:
                    self.send_response(200)
                    self.send_header("Set-Cookie", "hadoop.auth=other; Path=/")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass
        return Handler

    made = {}
    for kind in seen:
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler(kind))
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
        made[kind] = server
    yield {k: f"http://127.0.0.1:{s.server_address[1]}" for k, s in made.items()}, seen
    for server in made.values():
        server.shutdown()
        server.server_close()


def test_a_server_that_asks_for_kerberos_without_gssapi_says_what_to_install(servers, monkeypatch):
    monkeypatch.setattr(spnego, "requests_gssapi", None)
    urls, _ = servers
    with pytest.raises(spnego.SpnegoError) as refused:
        spnego.session().get(urls["negotiate"] + "/ws/v1/cluster/info?x=1", timeout=5)
    assert str(refused.value) == (f"{urls['negotiate']}/ws/v1/cluster/info asks for Kerberos (SPNEGO), and this "
                                  f"Python has no GSSAPI: {spnego.INSTALL_HINT}")
    assert isinstance(refused.value, requests.RequestException)  # callers' handling of an unreachable server


def test_a_server_that_does_not_ask_is_answered_as_before(servers):
    urls, seen = servers
    assert spnego.session(ccache="FILE:/nonexistent/cc").get(urls["plain"], timeout=5).status_code == 200
    assert seen["plain"] == [None]


def test_missing_credentials_are_said_only_when_a_server_asks_and_name_kinit(servers):
    urls, _ = servers
    session = spnego.Session(creds_problem="no Kerberos credentials for the default principal from ticket cache "
                                           "FILE:/x: No credentials cache found")
    with pytest.raises(spnego.SpnegoError, match="asks for Kerberos .SPNEGO. and there is no ticket: run kinit"):
        session.get(urls["negotiate"], timeout=5)


def test_each_daemon_gets_its_own_cookies_not_another_ports(servers):
    """Cookies ignore ports: the NameNode would get the RM's hadoop.auth, signed with another
    secret, and refuse it."""
    urls, seen = servers
    session = spnego.Session(creds_problem="no ticket here")  # whatever ticket this machine may hold
    session.get(urls["plain"], timeout=5)
    session.get(urls["plain"], timeout=5)
    with pytest.raises(spnego.SpnegoError):
        session.get(urls["negotiate"], timeout=5)
    assert seen["plain"] == [None, "hadoop.auth=other"]  # its own cookie back to it
    assert seen["negotiate"] == [None]  # and not to the other port


@pytest.mark.parametrize("failure,expected", [
    ("stepping context failed: Major (458752): No credentials were supplied, or the credentials were unavailable",
     "there is no ticket: run kinit"),
    ("initiating context failed: Server not found in Kerberos database", "no token could be made: initiating"),
    (None, "refused the Kerberos (SPNEGO) token it was sent (HTTP 401)"),
])
def test_why_no_token_became_the_line(failure, expected):
    assert expected in spnego.refusal("http://rm:8088/ws/v1/cluster?user.name=x", failure, True)
    assert "user.name" not in spnego.refusal("http://rm:8088/ws/v1/cluster?user.name=x", failure, True)
