"""The client's look at the cluster before it creates anything (tony_py/client/preflight.py):
no ResourceManager answering is one line naming the addresses and exit 2 at once (a Hadoop
client would retry for 15 minutes); a cluster older than TonY-py supports is refused with its
release and the oldest supported, from the RM's /ws/v1/cluster/info. Here the RM is a socket
that accepts and a small HTTP server that answers as an RM's web UI does: what is tested is the
client's reading of them, not YARN."""

from __future__ import annotations

import http.server
import json
import socket
import threading

import pytest

from tony_py import hadoop_support
from tony_py.client import preflight
from tony_py.errors import SetupError, UsageError

pytestmark = pytest.mark.unit


def site(tmp_path, rpc: str, web: str):
    (tmp_path / "yarn-site.xml").write_text(
        "<configuration>"
        f"<property><name>yarn.resourcemanager.address</name><value>{rpc}</value></property>"
        f"<property><name>yarn.resourcemanager.webapp.address</name><value>{web}</value></property>"
        "</configuration>")
    return tmp_path


@pytest.fixture
def rm():
    """A listening RPC port and a web UI answering /ws/v1/cluster/info with `rm.version`."""
    rpc = socket.socket()
    rpc.bind(("127.0.0.1", 0))
    rpc.listen()
    state = {"version": "3.3.6"}

    class Info(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"clusterInfo": {"resourceManagerVersion": state["version"],
                                               "hadoopVersion": state["version"]}}).encode()
            self.send_response(200 if self.path == "/ws/v1/cluster/info" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Info)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    yield state, f"127.0.0.1:{rpc.getsockname()[1]}", f"127.0.0.1:{web.server_address[1]}"
    web.shutdown()
    rpc.close()


def closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def test_no_rm_answering_is_one_line_naming_the_address_and_the_key(tmp_path):
    dead = closed_port()
    with pytest.raises(SetupError, match=rf"no ResourceManager answers at {dead} \(yarn.resourcemanager.address\)") as e:
        preflight.check_cluster(site(tmp_path, dead, closed_port()))
    assert e.value.exit_code == 2 and "HADOOP_CONF_DIR" in str(e.value)


def test_an_older_cluster_is_refused_with_its_release_and_the_oldest_supported(tmp_path, rm):
    state, rpc, web = rm
    conf = site(tmp_path, rpc, web)
    assert preflight.check_cluster(conf) == "3.3.6"
    state["version"] = "3.1.4"
    with pytest.raises(UsageError, match=rf"Hadoop 3.1.4 is older than TonY-py supports; it needs "
                                         rf"{hadoop_support.OLDEST} or newer") as e:
        preflight.check_cluster(conf)
    assert e.value.exit_code == 2 and f"http://{web}" in str(e.value)
    state["version"] = "3.3.6-amzn-2"  # a vendor's build of a supported release
    assert preflight.check_cluster(conf) == "3.3.6-amzn-2"


def test_a_web_ui_that_does_not_answer_leaves_the_release_unknown(tmp_path, rm):
    _, rpc, _ = rm
    assert preflight.check_cluster(site(tmp_path, rpc, closed_port())) is None


def test_releases_are_compared_as_numbers():
    assert hadoop_support.supported("3.10.0") and hadoop_support.supported(hadoop_support.OLDEST)
    assert not hadoop_support.supported("3.2.3") and not hadoop_support.supported("2.10.2")
    assert hadoop_support.parse("3.2.4.3.2.2.0-1") == (3, 2, 4) and hadoop_support.parse("x") is None
