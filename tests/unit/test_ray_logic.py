"""Ray on YARN without Ray: the job shape and its checks, what each task is told, the `ray
start` command line a node runs, the runner's cleanup, and the dashboard link the AM shows."""

import json
import os
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pytest

from tony_py import frameworks
from tony_py.config.build import build_job_spec
from tony_py.config.layers import load_conf
from tony_py.config.spec import TaskId
from tony_py.errors import ConfigError, UsageError
from tony_py.frameworks import ray, ray_node
from tony_py.job.view import dashboards

CLUSTER = {"head": ["h0:6000"], "worker": ["h1:7001", "h0:7002"]}
pytestmark = pytest.mark.unit


def spec(tmp_path, *overrides, command="python driver.py --n 3"):
    conf = load_conf(None, [f"tony.containers.command={command}", "tony.application.framework=ray", *overrides],
                     env={}, cwd=tmp_path)
    return build_job_spec(conf)


# ---- the job shape ---------------------------------------------------------------------------------
def test_a_ray_job_is_one_head_that_is_the_chief_and_untracked_workers(tmp_path):
    s = spec(tmp_path, "tony.worker.instances=2", "tony.head.memory=3g", "tony.head.vcores=2")
    assert [(t.name, t.instances) for t in s.types] == [("head", 1), ("worker", 2)]
    assert s.type("head").resources.memory_mb == 3072 and s.type("head").resources.vcores == 2
    assert s.chief() == TaskId("head", 0) and s.tb_port_task() == TaskId("head", 0)
    assert s.tracked_tasks() == [TaskId("head", 0)]  # the driver's end ends the job
    assert not s.single_node


def test_the_head_is_added_when_only_workers_or_nothing_is_set(tmp_path):
    assert [t.name for t in spec(tmp_path).types] == ["head"]  # a one-node Ray cluster, not a single-node job
    assert [t.name for t in spec(tmp_path, "tony.head.instances=1", "tony.worker.instances=1").types] == \
        ["head", "worker"]


@pytest.mark.parametrize("overrides,key,words", [
    (["tony.ps.instances=1"], "tony.ps.instances", "head and workers only"),
    (["tony.chief.instances=1"], "tony.chief.instances", "head and workers only"),
    (["tony.head.instances=2"], "tony.head.instances", "exactly one head"),
    (["tony.worker.instances=1", "tony.worker.command=python w.py"], "tony.worker.command", "runs Ray's worker node"),
    (["tony.application.distributed-mode=FCFS"], "tony.application.distributed-mode", "needs GANG"),
    (["tony.worker.instances=2", "tony.worker.min-instances=1"], "tony.worker.min-instances", "cannot shrink"),
])
def test_bad_ray_jobs_are_refused_naming_the_key(tmp_path, overrides, key, words):
    with pytest.raises(ConfigError) as err:
        spec(tmp_path, *overrides)
    assert err.value.key == key and words in str(err.value)


def test_the_driver_must_start_with_the_interpreter_that_runs_ray(tmp_path):
    with pytest.raises(ConfigError) as err:
        spec(tmp_path, command="bash run.sh")
    assert err.value.key == "tony.containers.command" and "Python interpreter" in str(err.value)
    spec(tmp_path, command="/opt/venv/bin/python -m my.driver --x 1")  # -m works


def test_without_a_command_the_head_asks_for_executes(tmp_path):
    conf = load_conf(None, ["tony.application.framework=ray", "tony.worker.instances=1"], env={}, cwd=tmp_path)
    with pytest.raises(UsageError, match="--executes"):
        build_job_spec(conf)


# ---- what each task is told ------------------------------------------------------------------------
def test_every_node_learns_the_head_and_its_own_resources_the_head_which_workers_to_wait_for(tmp_path):
    s = spec(tmp_path, "tony.worker.instances=2", "tony.head.memory=3g", "tony.worker.gpus=1", "tony.worker.vcores=4")
    head = frameworks.task_env(s, CLUSTER, TaskId("head", 0))
    worker = frameworks.task_env(s, CLUSTER, TaskId("worker", 1))
    assert head[ray.ROLE] == "head" and worker[ray.ROLE] == "worker"
    assert head[ray.HEAD_ADDRESS] == worker[ray.HEAD_ADDRESS] == "h0:6000"
    assert worker[ray.NODE_ADDRESS] == "h0:7002" and worker[ray.NODE_NAME] == "worker:1"
    assert (head[ray.CPUS], head[ray.GPUS], head[ray.MEMORY_MB]) == ("1", "0", "3072")
    assert (worker[ray.CPUS], worker[ray.GPUS], worker[ray.MEMORY_MB]) == ("4", "1", "2048")
    assert ray.expected_workers(head) == {"worker:0": "h1:7001", "worker:1": "h0:7002"}
    assert ray.WORKERS not in worker


def test_launch_runs_the_node_runner_with_the_commands_interpreter_and_keeps_the_command_as_driver():
    env = {ray.ROLE: "head", "X": "1"}
    command = "'/my venv/bin/python' driver.py --flag 'a b'"
    run, out = frameworks.launch("ray", command, env, 0, "/w")
    assert run == "'/my venv/bin/python' -m tony_py.frameworks.ray_node"
    assert out[ray.DRIVER_COMMAND] == command and out["X"] == "1"
    # a task that is no Ray node (a sidecar TensorBoard) runs its own command
    assert frameworks.launch("ray", "python -m tony_py.sidecar", {}, 0, "/w") == ("python -m tony_py.sidecar", {})


# ---- the `ray start` command line ----------------------------------------------------------------
def node_env(role, memory_mb=2048):
    return {ray.ROLE: role, ray.HEAD_ADDRESS: "h0:6000", ray.NODE_ADDRESS: "h0:6000" if role == "head" else "h1:7001",
            ray.NODE_NAME: f"{role}:0", ray.CPUS: "2", ray.GPUS: "1", ray.MEMORY_MB: str(memory_mb)}


def options(args):
    return {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)
            and not args[i + 1].startswith("--")}


def test_the_head_listens_on_its_reserved_port_and_every_other_port_is_one_the_runner_reserved():
    ports = {name: 50000 + i for i, name in enumerate(ray.ports_needed("head"))}
    args = ray.start_args(node_env("head"), ports, "/tmp/tony-ray-x/t")
    opts = options(args)
    assert "--head" in args and "--block" in args and opts["--port"] == "6000"
    assert opts["--dashboard-host"] == "h0" and opts["--node-ip-address"] == "h0"  # never 0.0.0.0
    for name, port in ports.items():
        assert opts[f"--{name}"] == str(port)
    # every port Ray would otherwise take at a fixed default is set
    assert {"--dashboard-port", "--ray-client-server-port", "--dashboard-agent-listen-port",
            "--metrics-export-port", "--runtime-env-agent-port", "--object-manager-port",
            "--node-manager-port", "--dashboard-agent-grpc-port"} <= set(opts)
    assert (opts["--min-worker-port"], opts["--max-worker-port"]) == ("0", "0")  # OS-chosen worker ports
    assert opts["--temp-dir"] == "/tmp/tony-ray-x/t" and opts["--node-name"] == "head:0"
    assert (opts["--num-cpus"], opts["--num-gpus"]) == ("2", "1")
    assert ray.dashboard_url(node_env("head"), ports) == f"http://h0:{ports['dashboard-port']}"


def test_a_worker_joins_the_head_with_its_reserved_port_as_its_raylets():
    ports = {name: 50000 + i for i, name in enumerate(ray.ports_needed("worker"))}
    opts = options(ray.start_args(node_env("worker"), ports, "/tmp/t"))
    assert opts["--address"] == "h0:6000" and opts["--node-manager-port"] == "7001"
    assert "--head" not in opts and "--dashboard-port" not in opts and "--ray-client-server-port" not in opts


@pytest.mark.parametrize("role,memory_mb,task_mb,store_mb", [
    ("head", 4096, 4096 - 1228 - 2048, 1228),
    ("head", 3072, 3072 - 921 - 2048, 921),  # the default head: what its daemons and store leave
    ("worker", 4096, 4096 - 1228 - 512, 1228),
    ("worker", 512, 64, 153),  # never below what Ray accepts
    ("worker", 200, 64, 80),
])
def test_memory_and_object_store_come_from_the_container_not_the_host(role, memory_mb, task_mb, store_mb):
    memory, store = ray.resources(role, memory_mb)
    assert (memory, store) == (task_mb << 20, store_mb << 20)
    opts = options(ray.start_args(node_env(role, memory_mb), {n: 1 for n in ray.ports_needed(role)}, "/t"))
    assert (opts["--memory"], opts["--object-store-memory"]) == (str(memory), str(store))


# ---- the runner ------------------------------------------------------------------------------------
def test_a_driver_killed_by_a_signal_exits_as_a_shell_says_so():
    assert ray_node.exit_status(3) == 3 and ray_node.exit_status(-signal.SIGKILL) == 137


def test_ray_gets_a_short_temp_dir_linked_to_the_working_dir(tmp_path):
    link, parent = ray_node.temp_dir(str(tmp_path))
    try:
        assert os.path.realpath(link) == str(tmp_path / "tony-ray") and len(link) < 40
    finally:
        os.unlink(link)
        os.rmdir(parent)


def test_reserved_ports_are_distinct_and_held():
    socks = ray_node.reserve(ray.ports_needed("head"))
    try:
        ports = {s.getsockname()[1] for s in socks.values()}
        assert len(ports) == len(ray.ports_needed("head"))
    finally:
        for s in socks.values():
            s.close()


ORPHANING = """
import os, subprocess, sys, time
# a child that starts a grandchild and dies: the grandchild is orphaned, as Ray's agents are
# when their raylet is killed
child = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time; "
                          "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(61.234)']); time.sleep(0.3)"])
child.wait()  # it is gone: its child now belongs to this subreaper, however long that took
"""


def test_the_runner_finds_and_kills_processes_orphaned_below_it(tmp_path):
    script = tmp_path / "runner.py"
    script.write_text(
        "import sys, time\nfrom tony_py.frameworks import ray_node\nray_node.become_subreaper()\n"
        + ORPHANING + "left = ray_node.descendants(__import__('os').getpid())\n"
        "print(len(left), ray_node.kill_descendants(), len(ray_node.descendants(__import__('os').getpid())))\n")
    started = time.monotonic()
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr
    found, killed, left = map(int, out.stdout.split())
    assert found == killed >= 1 and left == 0  # the orphan was re-parented here, then killed (and reaped)
    assert not [p for p in os.listdir("/proc") if p.isdigit() and b"61.234" in _cmdline(p)]
    assert time.monotonic() - started < 45  # killed, not waited for (it sleeps 61 s)


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def test_the_driver_runs_as_the_shell_command_it_was_given(tmp_path, monkeypatch):
    """run_head's last step, without Ray: the command, with RAY_ADDRESS, and its exit code."""
    node = ray_node.Node({**node_env("head"), ray.DRIVER_COMMAND: f"echo $RAY_ADDRESS > {tmp_path}/a; exit 7"})
    node.proc, node.ports = _ray_start(None), {"dashboard-port": 1}
    monkeypatch.setattr(ray_node, "listening", lambda address: True)
    monkeypatch.setattr(ray_node.subprocess, "Popen", _popen_skipping_wait(ray_node.subprocess.Popen))
    monkeypatch.delenv("TONY_CALLBACK_FILE", raising=False)
    assert ray_node.run_head(node) == 7
    assert (tmp_path / "a").read_text().strip() == "h0:6000"


def _ray_start(code):
    """A node's `ray start --block`: running (None), or ended with `code` (1: it gave up, Ray's
    fixed 30 s for a raylet to register ran out)."""
    return SimpleNamespace(returncode=code, poll=lambda: code)


def test_a_head_whose_start_fails_early_starts_again_on_the_same_ports(monkeypatch, capsys):
    node = ray_node.Node({**node_env("head"), ray.DRIVER_COMMAND: "exit 0"})
    node.proc, node.ports = _ray_start(1), {"dashboard-port": 1}
    starts = []

    def start(again=False):
        starts.append((again, dict(node.ports)))
        node.proc = _ray_start(None)

    monkeypatch.setattr(node, "start", start)
    monkeypatch.setattr(node, "stop", lambda: None)
    monkeypatch.setattr(ray_node, "listening", lambda address: True)
    monkeypatch.setattr(ray_node.subprocess, "Popen", _popen_skipping_wait(ray_node.subprocess.Popen))
    monkeypatch.delenv("TONY_CALLBACK_FILE", raising=False)
    assert ray_node.run_head(node) == 0  # the second start came up, the workers joined, the driver ran
    assert starts == [(True, {"dashboard-port": 1})]
    assert "Ray's head node failed to start (exit code 1)" in capsys.readouterr().err


def test_a_head_that_never_starts_fails_after_its_attempts_saying_so(monkeypatch, tmp_path):
    node = ray_node.Node({**node_env("head"), ray.DRIVER_COMMAND: "exit 0"})
    node.proc, node.ports = _ray_start(1), {"dashboard-port": 1}
    starts = []
    monkeypatch.setattr(node, "start", lambda again=False: starts.append(again))
    monkeypatch.setattr(node, "stop", lambda: None)
    monkeypatch.setattr(ray_node, "listening", lambda address: False)
    monkeypatch.setenv("TONY_ERROR_FILE", str(tmp_path / "error.json"))
    assert ray_node.run_head(node) == 1
    assert starts == [True] * (ray_node.START_ATTEMPTS - 1)
    error = json.loads((tmp_path / "error.json").read_text())
    assert f"({ray_node.START_ATTEMPTS} starts)" in error["message"], error


def _popen_skipping_wait(real):
    def popen(args, **kwargs):
        if args[-1] == "wait":  # the waiter needs a Ray cluster: stand in with a success
            return real(["true"])
        return real(args, **kwargs)
    return popen


# ---- a worker node's runner ------------------------------------------------------------------------
def _worker(monkeypatch, tmp_path, runs, head_down=()):
    """A worker's runner whose `ray start`s end as `runs` say, (seconds it ran, exit code) each, with
    the head's GCS silent during the (from, to) spans of head_down; time passes only as a node runs
    and as the runner sleeps. (The node, the times its starts came.)"""
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(ray_node.time, "monotonic", lambda: clock.now)
    monkeypatch.setattr(ray_node.time, "sleep", lambda s: setattr(clock, "now", clock.now + s))
    monkeypatch.setattr(ray_node, "listening", lambda _: not any(a <= clock.now < b for a, b in head_down))
    monkeypatch.setenv("TONY_ERROR_FILE", str(tmp_path / "error.json"))
    node, runs, starts = ray_node.Node(node_env("worker")), iter(runs), []

    def start(again=False):
        seconds, code = next(runs)
        starts.append(clock.now)
        node.proc = SimpleNamespace(wait=lambda: setattr(clock, "now", clock.now + seconds) or code)

    monkeypatch.setattr(node, "start", start)
    monkeypatch.setattr(node, "stop", lambda: None)
    return node, starts


def test_a_worker_whose_start_fails_early_starts_again_until_the_join_timeout_not_six_times(monkeypatch, tmp_path):
    node, starts = _worker(monkeypatch, tmp_path, [(10, 1)] * 100)
    assert ray_node.run_worker(node, 300.0) == 1
    # every 10 s until one ended 300 s after the first start: the head's verdict, naming the
    # nodes that did not join, is the job's; the worker's own exit 1 comes after it
    assert starts == [1000.0 + 10 * i for i in range(31)] and len(starts) > ray_node.START_ATTEMPTS
    assert not (tmp_path / "error.json").exists()


@pytest.mark.parametrize("run", [(100, 3), (5, 0)])
def test_a_worker_node_that_ends_with_the_head_up_after_its_start_or_cleanly_ends_the_task(monkeypatch, tmp_path, run):
    node, starts = _worker(monkeypatch, tmp_path, [run, (10, 1)])
    assert ray_node.run_worker(node, 300.0) == run[1] and starts == [1000.0]  # not started again


def test_a_worker_node_that_ended_with_the_head_gone_waits_for_the_head_and_joins_it_again(
        monkeypatch, tmp_path, capsys):
    # it ran 100 s (a failure of its own, had the head still answered), the head's GCS was gone
    node, starts = _worker(monkeypatch, tmp_path, [(100, 1), (200, 2)], head_down=[(1100, 1130)])
    assert ray_node.run_worker(node, 300.0) == 2  # the node that joined again, ended later
    assert starts == [1000.0, 1130.0] and not (tmp_path / "error.json").exists()
    assert "after the head's GCS at h0:6000 went away: waiting for the head" in capsys.readouterr().err
    # a head that never answers again: the worker fails after the join timeout, naming it
    node, starts = _worker(monkeypatch, tmp_path, [(100, 1)], head_down=[(1100, float("inf"))])
    assert ray_node.run_worker(node, 300.0) == 1 and starts == [1000.0]
    message = json.loads((tmp_path / "error.json").read_text())["message"]
    assert "h0:6000 did not answer for 300 s" in message and ray_node.JOIN_TIMEOUT in message


# ---- the dashboard on the AM page --------------------------------------------------------------------
def test_dashboards_come_from_callbacks_with_a_plain_http_url_only():
    callbacks = {"head:0": {"dashboard_url": "http://h0:8265", "dashboard_name": "Ray dashboard"},
                 "driver:0": {"port": 9999},
                 "worker:0": {"dashboard_url": "javascript:alert(1)"},
                 "worker:1": {"dashboard_url": "http://h1:1/x", "dashboard_name": "x" * 100}}
    assert dashboards(callbacks) == (("head:0", "Ray dashboard", "http://h0:8265"),
                                     ("worker:1", "dashboard", "http://h1:1/x"))


def test_worker_nodes_start_once_the_head_announced_its_node(tmp_path):
    s = spec(tmp_path, "tony.worker.instances=2")
    assert frameworks.ready(s, TaskId("head", 0), {})
    assert not frameworks.ready(s, TaskId("worker", 0), {})
    assert not frameworks.ready(s, TaskId("worker", 0), {"head:0": {"host": "h0"}})
    assert frameworks.ready(s, TaskId("worker", 1), {"head:0": {"host": "h0", "dashboard_url": "http://h0:1"}})


def test_the_head_names_the_worker_nodes_that_did_not_join_in_the_root_cause(tmp_path, monkeypatch):
    fake = SimpleNamespace(init=lambda **kw: None, shutdown=lambda: None,
                                 nodes=lambda: [{"NodeName": "head:0", "Alive": True},
                                                {"NodeName": "worker:0", "Alive": True},
                                                {"NodeName": "worker:1", "Alive": False}])
    monkeypatch.setitem(sys.modules, "ray", fake)
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TONY_ERROR_FILE", str(error_file))
    env = {**node_env("head"), ray.WORKERS: "worker:0=h1:7001,worker:1=h0:7002", ray_node.JOIN_TIMEOUT: "0.5"}
    assert ray_node.wait_for_workers(env) == 1
    message = json.loads(error_file.read_text())["message"]
    assert "worker:1 (h0:7002)" in message and "worker:0" not in message and ray_node.JOIN_TIMEOUT in message
    fake.nodes = lambda: [{"NodeName": n, "Alive": True} for n in ("head:0", "worker:0", "worker:1")]
    assert ray_node.wait_for_workers(env) == 0


def test_the_node_runner_imports_with_the_standard_library_alone():
    """It runs in the user's environment, where TonY-py's own packages (defusedxml, ...) are not
    on the path: importing it must need nothing but tony_py itself."""
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    code = ("import sys; sys.path.insert(0, sys.argv[1]); import tony_py.frameworks.ray_node; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('defusedxml', 'rich', 'requests', 'py4j')))")
    run = subprocess.run([sys.executable, "-I", "-S", "-c", code, str(root)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


def test_bad_ray_sizes_and_shapes_are_refused_naming_the_key(tmp_path):
    def build(*pairs):
        conf = load_conf(None, ["tony.application.framework=ray", "tony.containers.command=python d.py",
                                "tony.worker.instances=1", *pairs], env={}, cwd=tmp_path)
        return build_job_spec(conf, python="python")

    head = next(t for t in build().types if t.name == "head")  # the defaults fit
    assert head.resources.memory_mb == 3072  # a Ray head's daemons need more than TonY's 2g per type
    for pairs, key in ((["tony.worker.memory=256m"], "tony.worker.memory"),
                       (["tony.head.memory=512m"], "tony.head.memory"),
                       (["tony.application.prepare-stage=head", "tony.application.training-stage=worker"],
                        "tony.application.prepare-stage"),
                       (["tony.execution.envs=TONY_RAY_JOIN_TIMEOUT_S=5m"], "tony.execution.envs"),
                       (["tony.execution.envs=TONY_RAY_JOIN_TIMEOUT_S=nan"], "tony.execution.envs")):
        with pytest.raises(ConfigError) as err:
            build(*pairs)
        assert key in str(err.value)


def test_every_ray_task_gets_ray_token_authentication_with_the_derived_token(tmp_path):
    from tony_py.auth import RAY_TOKEN_PURPOSE, derived_token
    from tony_py.executor.settings import Settings
    from tony_py.executor.taskenv import user_env

    def settings(**overrides):
        values = dict(task="worker:0", am_url="http://am:1", secret="s" * 64, container_id="c1", command="x",
                      execution_env={}, heartbeat_s=1, metrics_interval_s=5, execution_timeout_s=0,
                      registry_timeout_s=0, reserve_tb_port=False, src_zip=None, runtime_dir=None, log_dir=tmp_path,
                      am_lost_timeout_s=60, framework="ray")
        values.update(overrides)
        return Settings(**values)

    env = user_env(settings(), {}, {}, 0, tmp_path)
    assert env["RAY_AUTH_MODE"] == "token" and env["RAY_AUTH_TOKEN"] == derived_token("s" * 64, RAY_TOKEN_PURPOSE)
    assert "RAY_AUTH_TOKEN" not in user_env(settings(framework="pytorch"), {}, {}, 0, tmp_path)
    opted_out = user_env(settings(execution_env={"RAY_AUTH_MODE": "disabled"}), {}, {}, 0, tmp_path)
    assert opted_out["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in opted_out
