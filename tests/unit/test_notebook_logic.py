"""`tony notebook`'s pure logic: its flags and job shape, the relay, where the task listens, and the
token both sides derive from the app secret (tests/integration/test_notebook.py runs it on YARN)."""

from __future__ import annotations

import socket
import sys
import threading

import pytest

from harness import Harness
from tony_py.auth import NOTEBOOK_TOKEN_PURPOSE, derived_token
from tony_py.client.notebook import DEFAULT_LIFETIME_MS, NotebookDoor, notebook_address, open_lines
from tony_py.client.prepare import prepare
from tony_py.client.relay import Relay
from tony_py.errors import UsageError
from tony_py.executor.settings import Settings
from tony_py.executor.taskenv import user_env
from tony_py.jupyter import server_args, server_env


def _prepared(tmp_path, *argv, conf_file: str | None = None):
    door = NotebookDoor()
    try:
        args = door.parse([*argv, *(["--conf_file", conf_file] if conf_file else [])], "tony notebook")
        return door, prepare(args, door.adjust)
    finally:
        door.close()


def test_the_default_job_is_one_jupyterlab_task_alive_for_a_day(tmp_path):
    _, job = _prepared(tmp_path, "--python_binary_path", sys.executable, "--conf", "tony.notebook.gpus=1",
                       "--conf", "tony.notebook.memory=3g")
    assert list(job.spec.type_names()) == ["notebook"]
    assert [t.instances for t in job.spec.types] == [1]
    assert job.spec.framework == "standalone"
    assert job.spec.timeout_ms == DEFAULT_LIFETIME_MS
    assert job.spec.command_for("notebook") == f"{sys.executable} -m tony_py.jupyter"
    assert job.conf.get("tony.notebook.gpus") == "1"


def test_what_the_user_sets_wins_over_the_notebook_defaults(tmp_path):
    _, job = _prepared(tmp_path, "--executes", "serve.sh", "--conf", "tony.application.timeout=60000")
    assert job.spec.timeout_ms == 60000
    assert job.spec.command_for("notebook") == "serve.sh"  # --executes: the user's own web server


@pytest.mark.parametrize("argv,needle", [
    (["--conf", "tony.worker.instances=2"], "tony.worker.instances=2"),
    (["--conf", "tony.notebook.instances=2"], "exactly 1 notebook task"),
    (["--local"], "--local"),
    (["--detach"], "--detach"),
    (["--port", "70000"], "--port 70000"),
    (["--port", "x"], "--port"),
])
def test_bad_notebook_input_names_the_flag_or_key(tmp_path, argv, needle):
    with pytest.raises(UsageError) as err:
        _prepared(tmp_path, *argv)
    assert needle in str(err.value) and err.value.exit_code == 2


def test_a_busy_port_is_bad_input_before_anything_is_submitted():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(UsageError, match=f"--port {port}: cannot listen"):
            NotebookDoor().parse(["--port", str(port)], "tony notebook")


def _echo_server(tag: bytes) -> tuple[socket.socket, int]:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve():
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            with conn:
                conn.sendall(tag)
                while data := conn.recv(65536):
                    conn.sendall(data.upper())

    threading.Thread(target=serve, daemon=True).start()
    return server, server.getsockname()[1]


def test_the_relay_carries_bytes_both_ways_and_follows_a_moved_task():
    first, first_port = _echo_server(b"1:")
    second, second_port = _echo_server(b"2:")
    relay = Relay()
    try:
        assert relay._sock.getsockname() == ("127.0.0.1", relay.port)  # never a wildcard address
        relay.start("127.0.0.1", first_port)
        payload = b"x" * 300_000  # more than one read's worth
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as conn:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)  # half-close: the answer still comes back
            got = b""
            while chunk := conn.recv(65536):
                got += chunk
        assert got == b"1:" + payload.upper()
        relay.start("127.0.0.1", second_port)  # a restarted task's new address: new connections go there
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as conn:
            conn.sendall(b"again")
            conn.shutdown(socket.SHUT_WR)
            got = b""
            while chunk := conn.recv(100):
                got += chunk
        assert got == b"2:AGAIN"
    finally:
        relay.close()
        first.close()
        second.close()
    with socket.socket() as probe:
        assert probe.connect_ex(("127.0.0.1", relay.port)) != 0  # closed with the client


def test_the_relay_drops_a_connection_when_the_task_is_unreachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    relay = Relay()
    try:
        relay.start("127.0.0.1", dead_port)
        with socket.create_connection(("127.0.0.1", relay.port), timeout=10) as conn:
            conn.settimeout(10)
            assert conn.recv(10) == b""  # closed, not hung
    finally:
        relay.close()


def test_the_address_is_the_running_notebook_tasks():
    rows = [{"type": "notebook", "state": "REGISTERED", "address": "h1:1"},
            {"type": "worker", "state": "RUNNING", "address": "h2:2"}]
    assert notebook_address({"tasks": rows}) is None
    rows.append({"type": "notebook", "state": "RUNNING", "address": "node-7.example:40123"})
    assert notebook_address({"tasks": rows}) == ("node-7.example", 40123)
    assert notebook_address(None) is None


def test_the_open_lines_carry_the_token_and_the_ssh_tunnel():
    first = open_lines(4321, "t0k", ("h", 9), custom_command=False, first=True)
    assert "http://127.0.0.1:4321/lab?token=t0k" in first[0]
    assert "ssh -N -L 8888:127.0.0.1:4321 " in first[1] and "http://localhost:8888/lab?token=t0k" in first[1]
    custom = open_lines(4321, "t0k", ("h", 9), custom_command=True, first=True)
    assert "http://127.0.0.1:4321/ " in custom[0] and "$JUPYTER_TOKEN): t0k" in custom[1]  # its own server's token
    assert "t0k" not in "".join(open_lines(4321, None, ("h", 9), custom_command=False, first=True))
    assert "runs at h:9 now" in open_lines(4321, "t0k", ("h", 9), custom_command=False, first=False)[0]


def test_the_notebook_task_gets_its_port_and_the_token_the_client_derives(tmp_path):
    h = Harness(tmp_path, "tony.notebook.instances=1", "tony.application.framework=standalone")
    containers = h.bring_up()
    env = h.wait_spec("notebook:0", 0, containers["notebook:0"], 0)["env"]
    assert env["NOTEBOOK_PORT"] == "2000"  # the port its executor registered
    assert "JUPYTER_TOKEN" not in env  # never in the AM's answer: derived on the node
    secret = "s" * 64
    settings = Settings(task="notebook:0", am_url="http://am:1", secret=secret, container_id="c1", command="x",
                        execution_env={}, heartbeat_s=1, metrics_interval_s=5, execution_timeout_s=0,
                        registry_timeout_s=0, reserve_tb_port=False, src_zip=None, runtime_dir=None,
                        log_dir=tmp_path, am_lost_timeout_s=60)
    task_env = user_env(settings, {}, env, 0, tmp_path)
    assert task_env["JUPYTER_TOKEN"] == derived_token(secret, NOTEBOOK_TOKEN_PURPOSE)
    worker = user_env(Settings(**{**settings.__dict__, "task": "worker:0"}), {}, {}, 0, tmp_path)
    assert "JUPYTER_TOKEN" not in worker


def test_jupyterlab_listens_on_the_nodes_address_with_private_runtime_files(tmp_path):
    args = server_args("10.1.2.3", "4000", str(tmp_path), as_root=False)
    assert "--ServerApp.ip=10.1.2.3" in args and "--ServerApp.port=4000" in args
    assert "--ServerApp.port_retries=0" in args and "--no-browser" in args
    assert not any("allow_root" in a for a in args)
    assert "--ServerApp.allow_root=True" in server_args("10.1.2.3", "4000", str(tmp_path), as_root=True)
    env = server_env({"HOME": "/home", "JUPYTER_CONFIG_PATH": "/site/jupyter"}, str(tmp_path))
    assert env["JUPYTER_RUNTIME_DIR"].startswith(str(tmp_path))
    # TonY-py's config first in Jupyter's search path: a user's `token = ''` cannot turn the token off
    ours, *rest = env["JUPYTER_CONFIG_PATH"].split(":")
    assert ours.startswith(str(tmp_path)) and rest == ["/site/jupyter"]
    config = tmp_path / ".jupyter-config" / "jupyter_server_config.py"
    assert "c.IdentityProvider.token = os.environ['JUPYTER_TOKEN']" in config.read_text()
    assert (config.stat().st_mode & 0o777) == 0o600 and "JUPYTER_TOKEN" not in env


# ---- the monitor's part: relay once Jupyter listens with its token, never to a stale address -------
class _Jupyter:
    """A stand-in for the notebook task's server: /api/status answers `status`."""

    def __init__(self, status: int):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = ("127.0.0.1", self.server.server_address[1])
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


class _Job:
    app_id = "application_1_0001"

    def __init__(self, address=None, state="RUNNING"):
        self.report = {"state": "RUNNING", "attempt": 1}
        self.killed = None
        self.set(address, state)

    def set(self, address, state="RUNNING"):
        rows = [{"name": "notebook:0", "type": "notebook", "state": state,
                 "address": f"{address[0]}:{address[1]}" if address else None}]
        self.am_status = {"tasks": rows}

    def request_kill(self, reason):
        self.killed = reason


def _monitor(job, tmp_path, monkeypatch, quiet=False):
    import io

    from tony_py.client import notebook
    from tony_py.client.notebook import NotebookMonitor

    monkeypatch.setenv("TONY_PY_CACHE", str(tmp_path / "cache"))
    # the in-process Jupyter answers at once, or refuses at once: a generous timeout only keeps a
    # loaded machine's slow answer from reading as no answer
    monkeypatch.setattr(notebook, "PROBE_TIMEOUT_S", 10.0)
    out = io.StringIO()  # not a terminal
    return NotebookMonitor(job, Relay(), "t0k3n", custom_command=False, out=out, quiet=quiet), out


def test_the_monitor_relays_once_jupyter_listens_and_keeps_the_token_off_a_pipe(tmp_path, monkeypatch):
    jupyter = _Jupyter(403)
    job = _Job(jupyter.address, state="REGISTERED")
    monitor, out = _monitor(job, tmp_path, monkeypatch)
    try:
        monitor._once(monitor.say)
        assert monitor.relay.target is None and out.getvalue() == ""  # not running yet: nothing to open
        job.set(jupyter.address)
        monitor._once(monitor.say)
        assert monitor.relay.target == jupyter.address
        printed = out.getvalue()
        assert f"http://127.0.0.1:{monitor.relay.port}/lab " in printed and "t0k3n" not in printed
        assert (monitor.url_file.stat().st_mode & 0o777) == 0o600
        assert f"/lab?token=t0k3n" in monitor.url_file.read_text()
        job.set(jupyter.address, state="FAILED")  # a restart is coming: its old port is nobody's to relay to
        monitor._once(monitor.say)
        assert monitor.relay.target is None
        job.set(jupyter.address)
        monitor._once(monitor.say)
        assert monitor.relay.target == jupyter.address and "runs at 127.0.0.1" in out.getvalue()
    finally:
        monitor.relay.close()
        jupyter.close()


def test_a_notebook_that_answers_without_its_token_is_killed_never_opened(tmp_path, monkeypatch):
    jupyter = _Jupyter(200)
    job = _Job(jupyter.address)
    monitor, out = _monitor(job, tmp_path, monkeypatch)
    try:
        monitor._once(monitor.say)
        assert job.killed and "without Jupyter's token" in job.killed
        assert monitor.relay.target is None and "open http" not in out.getvalue()
    finally:
        monitor.relay.close()
        jupyter.close()


def test_quiet_still_says_where_the_notebook_is(tmp_path, monkeypatch):
    jupyter = _Jupyter(403)
    monitor, out = _monitor(_Job(jupyter.address), tmp_path, monkeypatch, quiet=True)
    try:
        monitor._once(monitor.say)
        assert f"open http://127.0.0.1:{monitor.relay.port}/lab" in out.getvalue()
    finally:
        monitor.relay.close()
        jupyter.close()
