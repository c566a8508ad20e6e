"""What the client refuses before anything touches a cluster: every value that would break a job
after submission, named by its key or flag (exit code 2). Pure logic: no cluster, no JVM."""

import json
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tony_py.bridge.interrupts import InterruptGuard
from tony_py.client.flags import parse_args
from tony_py.client.prepare import prepare
from tony_py.config.layers import load_conf
from tony_py.config.model import ModelError
from tony_py.config.build import build_job_spec
from tony_py.config.fit import check_fits
from tony_py.config.spec import JobSpec
from tony_py.errors import ConfigError, UsageError


@pytest.fixture
def src(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    (d / "train.py").write_text("print('hi')\n")
    return d


def submit_args(src, *extra):
    return parse_args(["--src_dir", str(src), "--executes", "train.py", "--python_binary_path", sys.executable,
                       "--conf", "tony.worker.instances=1", *extra])


# ---- flags reach their fields (all three of TonY's spellings) ------------------------------------
@pytest.mark.parametrize("style", ["single-dash", "double-dash", "equals"])
def test_every_flag_form_reaches_its_field(style, src, tmp_path):
    conf_file = tmp_path / "job.xml"
    conf_file.write_text("<configuration><property><name>tony.worker.memory</name><value>3g</value></property>"
                         "</configuration>")
    flags = [("src_dir", str(src)), ("executes", "train.py"), ("python_binary_path", sys.executable),
             ("task_params", "--lr 0.1"), ("shell_env", "A=1"), ("container_env", "B=2"),
             ("conf_file", str(conf_file)), ("conf", "tony.worker.instances=3"), ("hdfs_classpath", "/libs")]
    argv = []
    for name, value in flags:
        argv += {"single-dash": [f"-{name}", value], "double-dash": [f"--{name}", value],
                 "equals": [f"--{name}={value}"]}[style]
    args = parse_args(argv)
    assert (args.src_dir, args.executes, args.task_params, args.hdfs_classpath) == (str(src), "train.py", "--lr 0.1",
                                                                                   "/libs")
    assert (args.shell_env, args.container_env, args.conf, args.conf_file) == (
        ["A=1"], ["B=2"], ["tony.worker.instances=3"], str(conf_file))
    spec = prepare(args).spec
    assert spec.command == f"{sys.executable} train.py --lr 0.1"
    assert spec.execution_env == {"A": "1"} and spec.container_env == {"B": "2"}
    assert spec.type("worker").instances == 3 and spec.type("worker").resources.memory_mb == 3072


# ---- values that would break the job after submission -------------------------------------------
@pytest.mark.parametrize("extra,key", [
    (["--task_params", "--tag a\x01b"], "tony.containers.command"),
    (["--conf", "tony.application.name=bad\x07name"], "tony.application.name"),
    (["--conf", "tony.yarn.queue=x\x0cy"], "tony.yarn.queue"),
])
def test_control_characters_that_xml_cannot_hold_are_refused(src, extra, key):
    with pytest.raises(ConfigError) as err:
        prepare(submit_args(src, *extra))
    assert err.value.key == key and "control character" in str(err.value)


def test_undecodable_argv_bytes_are_refused_naming_the_flag(src):
    bad = b"--lr \xff\xfe".decode("utf-8", "surrogateescape")  # what Python makes of non-UTF-8 argv
    with pytest.raises(UsageError, match="--task_params: .* is not valid UTF-8"):
        submit_args(src, "--task_params", bad)


@pytest.mark.parametrize("value,what", [
    ("X=a$(touch /tmp/pwned)", "a '$' that is not a $NAME"),
    ("X=`id`", "a backtick"),
    ("X=ends with\\", "a backslash"),
    ('X=say "hi"', "a double quote"),
])
def test_container_env_values_that_bash_would_interpret_are_refused(src, value, what):
    with pytest.raises(ConfigError) as err:
        prepare(submit_args(src, "--container_env", value))
    assert err.value.key == "--container_env" and what in str(err.value)


def test_the_same_check_guards_every_launch_script_value(src, tmp_path):
    with pytest.raises(ConfigError, match="tony.am.python.*double quote"):
        prepare(submit_args(src, "--conf", 'tony.am.python=/opt/py"thon'))
    with pytest.raises(ConfigError, match="tony.containers.envs.*'\\$'"):
        prepare(submit_args(src, "--conf", "tony.containers.envs=X=$((1+1))"))
    assert prepare(submit_args(src, "--container_env", "PATH=$PATH:/opt/bin")).spec.container_env == {
        "PATH": "$PATH:/opt/bin"}  # a variable reference is YARN's documented feature
    odd = tmp_path / "data$1.txt"
    odd.write_text("x")
    with pytest.raises(ConfigError, match="tony.containers.resources"):
        prepare(submit_args(src, "--conf", f"tony.containers.resources={odd}"))


@pytest.mark.parametrize("name", ["venv", "tony_runtime", "tony-final.xml", "tony-spec.json", "tony-secret"])
def test_src_dir_entries_named_like_localized_resources_are_refused(src, name):
    (src / name).mkdir()
    with pytest.raises(UsageError, match=f"--src_dir .*'{name}'"):
        prepare(submit_args(src))


def test_src_dir_zip_and_resource_names_are_checked_too(src, tmp_path):
    (tmp_path / "vocab.txt").write_text("a")
    archive = tmp_path / "src.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("train.py", "print(1)")
        zf.writestr("vocab.txt/evil", "x")
    with pytest.raises(UsageError, match="'vocab.txt'"):
        prepare(parse_args(["--src_dir", str(archive), "--executes", "train.py", "--conf", "tony.worker.instances=1",
                            "--conf", f"tony.containers.resources={tmp_path / 'vocab.txt'}"]))


# ---- config errors name their file; keys TonY-py ignores are named ------------------------------
def test_a_config_error_names_the_file_that_set_the_key(src, tmp_path):
    conf_file = tmp_path / "job.xml"
    conf_file.write_text("<configuration><property><name>tony.worker.memory</name><value>lots</value></property>"
                         "</configuration>")
    with pytest.raises(ConfigError) as err:
        prepare(submit_args(src, "--conf_file", str(conf_file)))
    assert str(err.value).startswith(f"tony.worker.memory (set in {conf_file}): bad memory size")


def test_unsupported_and_mistyped_keys_get_one_warning_each(src):
    job = prepare(submit_args(src, "--conf", "tony.task.executor.jvm.opts=-Xmx2g",
                              "--conf", "tony.application.timout=1000", "--conf", "tony.wroker.memory=4g",
                              "--conf", "tony.chief.memory=2g", "--conf", "tony.frobnicate=1"))
    text = "\n".join(job.warnings)
    assert len(job.warnings) == 4, text
    assert "tony.task.executor.jvm.opts (set in --conf): a TonY setting with no effect in TonY-py" in text
    assert "tony.application.timout (set in --conf): unknown key, ignored; did you mean tony.application.timeout?" \
        in text
    assert "tony.wroker.memory (set in --conf): the job has no type 'wroker'; did you mean tony.worker.memory?" in text
    assert "tony.frobnicate (set in --conf): unknown key, ignored" in text
    assert "tony.chief.memory" not in text  # a type without instances: TonY's normal, silent case


# ---- node labels ----------------------------------------------------------------------------------
def _spec(tmp_path, *overrides):
    return build_job_spec(load_conf(None, ["tony.containers.command=x", "tony.worker.instances=1", *overrides],
                                    env={}, cwd=tmp_path))


def test_a_node_label_no_running_node_carries_is_refused(tmp_path):
    cluster = {"resource_types": ["memory-mb", "vcores"], "nodes": [
        {"id": "n1:1", "labels": [], "capability": {"memory-mb": 8192, "vcores": 8}},
        {"id": "n2:1", "labels": ["gpu"], "capability": {"memory-mb": 8192, "vcores": 8}}]}
    check_fits(_spec(tmp_path, "tony.worker.node-label=gpu"), cluster)
    with pytest.raises(ConfigError) as err:
        check_fits(_spec(tmp_path, "tony.worker.node-label=tpu"), cluster)
    assert err.value.key == "tony.worker.node-label" and "labels on running nodes: gpu" in str(err.value)
    with pytest.raises(ConfigError, match="tony.application.node-label.*labels on running nodes: none"):
        check_fits(_spec(tmp_path, "tony.application.node-label=big"),
                   {"resource_types": [], "nodes": [cluster["nodes"][0]]})


# ---- the job spec file ------------------------------------------------------------------------------
def test_spec_to_file_to_spec_is_identity(src, tmp_path):
    spec = prepare(submit_args(src, "--conf", "tony.ps.instances=2", "--conf", "tony.worker.gpus=1",
                               "--shell_env", "A=1", "--conf", "tony.application.tags=a,b")).spec
    path = tmp_path / "tony-spec.json"
    path.write_text(json.dumps(spec.to_dict()))
    assert JobSpec.from_dict(json.loads(path.read_text())) == spec


@pytest.mark.parametrize("mutate,words", [
    (lambda d: d.update(surprise=1), "unknown key(s) surprise"),
    (lambda d: d.pop("queue"), "missing key(s) queue"),
    (lambda d: d.update(timeout_ms="10"), "JobSpec.timeout_ms: expected a whole number"),
    (lambda d: d["types"][0].update(instances=0), "bad job type"),
    (lambda d: d["types"][0]["resources"].update(memory_mb=True), "memory_mb: expected a whole number"),
    (lambda d: d.update(framework="caffe"), "framework 'caffe'"),
])
def test_a_spec_file_that_is_not_ours_is_refused_whole(src, mutate, words):
    data = prepare(submit_args(src)).spec.to_dict()
    mutate(data)
    with pytest.raises(ModelError, match=words.replace("(", r"\(").replace(")", r"\)")):
        JobSpec.from_dict(data)


# ---- signals never land inside a bridge call --------------------------------------------------------
def test_a_signal_during_a_bridge_call_is_raised_after_it(monkeypatch):
    guard = InterruptGuard()
    monkeypatch.setattr(signal, "signal", lambda *a: None)  # do not touch the test runner's handlers
    guard.install()
    finished = []
    with pytest.raises(KeyboardInterrupt):
        with guard.shielded():
            guard._handle(signal.SIGINT, None)  # arrives mid-call: remembered, not raised
            finished.append("the call completed")
    assert finished == ["the call completed"]
    with guard.cleanup():  # while cleaning up, nothing is raised at all
        guard._handle(signal.SIGTERM, None)
        with guard.shielded():
            pass
    fresh = InterruptGuard()
    fresh.install()
    with pytest.raises(KeyboardInterrupt):  # outside both: at once
        fresh._handle(signal.SIGHUP, None)


def test_a_burst_of_signals_raises_once_and_the_handler_reaches_its_cleanup(monkeypatch):
    """The jar's driver SIGKILLed: the client's parent-death SIGTERM comes once per driver JVM
    thread. A second KeyboardInterrupt before the kill started would leave the application running
    (seen in CI); only the first is raised, the rest are recorded."""
    guard = InterruptGuard()
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    guard.install()
    killed = []
    with pytest.raises(KeyboardInterrupt):
        try:
            guard._handle(signal.SIGTERM, None)
        except KeyboardInterrupt:
            guard._handle(signal.SIGTERM, None)  # the burst, while the first is being handled
            guard._handle(signal.SIGTERM, None)
            with guard.cleanup():
                killed.append("the application")
            raise
    assert killed == ["the application"] and guard.received == [signal.SIGTERM] * 3
    with guard.shielded():  # nothing is left pending to surface later either
        pass


def test_an_interrupt_wrapped_by_a_class_being_made_is_still_the_interrupt(monkeypatch):
    """A Ctrl-C while an import makes a dataclass comes out of Python 3.11 as a RuntimeError
    ("Error calling __set_name__"): the client's entry points still read it as the interrupt
    (exit 130, no traceback; seen in CI), and any other error stays an error."""
    guard = InterruptGuard()
    monkeypatch.setattr(signal, "signal", lambda *a: None)
    guard.install()

    class Interrupting:
        def __set_name__(self, owner, name):
            guard._handle(signal.SIGINT, None)

    with pytest.raises(BaseException) as caught:
        type("Made", (), {"field": Interrupting()})
    assert guard.caused(caught.value)
    assert not InterruptGuard().caused(RuntimeError("a real error"))


# ---- odd input of every kind: a one-line TonyError or a job, never anything else -----------------
ODD = ["", " ", "=", "==", "a=b=c", "-", "--", "\x00", "\udcff", "é", "😀", "x" * 5000, "${", "${tony.x}", "$(id)",
       "`id`", "\\", '"', "'", "\n", "-1", "1e9", "nan", "inf", "0x10", "1_000", "２", "1.5", "hdfs://", "://",
       "/", "..", "../../etc/passwd", "tony.worker.instances", "tony.worker.instances=", "tony.=1", "tony..x=1"]
KEYS = ["tony.worker.instances", "tony.worker.memory", "tony.worker.vcores", "tony.worker.gpus",
        "tony.application.framework", "tony.application.distributed-mode", "tony.am.retry-count",
        "tony.application.timeout", "tony.containers.envs", "tony.execution.envs", "tony.containers.resources",
        "tony.application.retryable-exit-codes", "tony.worker.command", "tony.application.name",
        "tony.staging.cache-visibility", "tony.task.heartbeat-interval-ms", "tony.X.instances", "tony.worker.node-label"]


def test_odd_values_end_in_a_one_line_error_or_a_valid_job(src):
    from tony_py.errors import TonyError

    outcomes = {"ok": 0, "refused": 0}
    for key in KEYS:
        for value in ODD:
            for argv in (["--conf", f"{key}={value}"], ["--task_params", value], ["--shell_env", value],
                         ["--container_env", value], ["--executes", value or "train.py"]):
                try:
                    job = prepare(submit_args(src, *argv))
                    job.spec.validate()
                    outcomes["ok"] += 1
                except TonyError as exc:
                    assert str(exc) and "\n" not in str(exc).strip(), (argv, exc)
                    outcomes["refused"] += 1
    assert outcomes["ok"] > 100 and outcomes["refused"] > 100, outcomes


@pytest.mark.parametrize("flag", ["--python_venv", "--src_dir"])
@pytest.mark.parametrize("name,said", [('ve"nv.zip', "a double quote"), ("v$(id).zip", "'$'"),
                                        ("v`id`.zip", "a backtick"), ("a\\b.zip", "a backslash")])
def test_remote_venv_and_src_dir_names_pass_the_launch_script_check(src, flag, name, said):
    """YARN links a remote file by its own name inside the container's launch script; a local
    one is uploaded under a name of ours. Exit 2, one line naming the flag and what is allowed."""
    args = parse_args(["--executes", "train.py", "--conf", "tony.worker.instances=1", flag, f"hdfs:///jobs/{name}"])
    with pytest.raises(UsageError) as err:
        prepare(args)
    text = str(err.value)
    assert err.value.exit_code == 2 and "\n" not in text
    assert text.startswith(f"{flag}: the file name") and said in text and "plain file name" in text


def test_remote_venv_and_src_dir_with_plain_names_pass(src):
    args = parse_args(["--executes", "train.py", "--conf", "tony.worker.instances=1",
                       "--python_venv", "hdfs:///envs/venv-1.2.zip", "--src_dir", "gs://bucket/src/"])
    assert prepare(args).spec is not None


@pytest.mark.parametrize("spelling", ["-help", "--help", "-h"])
def test_tonys_help_flag_in_every_spelling(spelling, capsys):
    from tony_py.client.flags import parse_args

    with pytest.raises(SystemExit) as done:
        parse_args([spelling])
    assert done.value.code == 0 and "--executes" in capsys.readouterr().out


def test_a_ctrl_c_while_zipping_goes_up_as_itself(tmp_path, monkeypatch):
    """A Ctrl-C that lands as ZipFile opens an entry (its writing flag already set) used to
    surface as ZipFile's own ValueError on close (an entry still open): an internal error
    instead of the client's exit 130."""
    import io
    import zipfile

    import pytest

    from tony_py.client.staging import _deterministic_zip

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(zipfile._ZipWriteFile, "__init__", interrupted)
    src = tmp_path / "a.py"
    src.write_text("print(1)")
    with pytest.raises(KeyboardInterrupt):
        _deterministic_zip([("a.py", src)], io.BytesIO())


def test_a_signal_in_a_child_between_fork_and_exec_leaves_the_child_to_exec(tmp_path):
    """Py4J starts the JVM with preexec_fn, so Python's at-fork hooks run in the child with the
    guard's handlers inherited. A Ctrl-C there printed "Exception ignored in: <function
    _after_fork>" (seen in CI); the child must go on to exec its program, quietly (the client got
    the same Ctrl-C and stops it; a child that died of it instead left the client starting a
    second JVM, seen in CI once)."""
    script = tmp_path / "fork.py"
    script.write_text(
        "import os, signal, subprocess, sys, time\n"
        "from tony_py.bridge.interrupts import guard\n"
        "guard.install()\n"
        "def hit():\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "    time.sleep(0.2)  # the handler runs here, in the child's at-fork hook\n"
        "os.register_at_fork(after_in_child=hit)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'raise SystemExit(7)'],"
        " preexec_fn=os.setpgrp)\n"
        "print(child.wait(), guard.received)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=30,
                          cwd=Path(__file__).resolve().parents[2])
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["7", "[]"]  # the child ran its program to its end; the parent saw nothing
    assert done.stderr == ""
