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
import time

import pytest

from tony_py import hadoop_support
from tony_py.client import preflight
from tony_py.errors import SetupError, UsageError

pytestmark = pytest.mark.unit


def site(tmp_path, rpc: str, web: str, **more: str):
    props = {"yarn.resourcemanager.address": rpc, "yarn.resourcemanager.webapp.address": web, **more}
    (tmp_path / "yarn-site.xml").write_text("<configuration>" + "".join(
        f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items()) + "</configuration>")
    return tmp_path


def ha_site(tmp_path, rpcs: list[str], wait_ms: int):
    """An HA pair rm1, rm2 at these RPC addresses (web UIs that do not answer), the client's wait on
    its RMs wait_ms."""
    more = {"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "rm1,rm2",
            preflight.RM_WAIT_KEY: str(wait_ms)}
    for rm, rpc in zip(("rm1", "rm2"), rpcs):
        more[f"yarn.resourcemanager.address.{rm}"] = rpc
        more[f"yarn.resourcemanager.webapp.address.{rm}"] = closed_port()
    return site(tmp_path, rpcs[0], closed_port(), **more)


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
    started = time.monotonic()
    with pytest.raises(SetupError, match=rf"no ResourceManager answers at {dead} \(yarn.resourcemanager.address\)") as e:
        preflight.check_cluster(site(tmp_path, dead, closed_port()))
    assert e.value.exit_code == 2 and "HADOOP_CONF_DIR" in str(e.value)
    assert time.monotonic() - started < 5  # a lone RM gets one look, not the client's 120 s wait on its RMs


def test_an_ha_pair_is_looked_at_again_while_it_fails_over_for_the_clients_wait_on_its_rms(tmp_path):
    """Neither RM takes a connection while the standby takes over (it opens its client port only
    once active): the client looks again, once a second, for yarn.resourcemanager.connect.max-wait.ms."""
    standby = socket.socket()  # bound, not listening: connections are refused until it listens
    standby.bind(("127.0.0.1", 0))
    pair = [closed_port(), f"127.0.0.1:{standby.getsockname()[1]}"]
    opens = threading.Timer(0.5, standby.listen)
    started = time.monotonic()
    opens.start()
    try:
        assert preflight.check_cluster(ha_site(tmp_path, pair, wait_ms=20_000)) is None  # (no web UI answers)
        assert 0.5 <= time.monotonic() - started < 10  # at the look after the standby became active
    finally:
        opens.cancel()
        standby.close()
    neither = [closed_port(), closed_port()]
    started = time.monotonic()
    with pytest.raises(SetupError) as e:
        preflight.check_cluster(ha_site(tmp_path, neither, wait_ms=1000))
    assert time.monotonic() - started >= 1.0 and e.value.exit_code == 2
    assert f"no ResourceManager answers at {neither[0]} (yarn.resourcemanager.address.rm1), " \
           f"{neither[1]} (yarn.resourcemanager.address.rm2)" in str(e.value)


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
