"""The executor's pure parts: error files, the job's files, unpacking src_dir, the user's environment,
the order in which the user's process group and its strays are stopped."""

import io
import json
import os
import signal
import stat
import sys
import time
import zipfile
from pathlib import Path
from types import SimpleNamespace

import pytest

from tony_py.am.http.server import MAX_BODY
from tony_py.config.spec import FINAL_CONF_FILE as FINAL_CONF, SPEC_FILE
from tony_py.executor.jobfiles import UnpackError, fetch_job_files, load_job, unpack_src
from tony_py.executor.settings import Settings
from tony_py.executor.taskenv import MAX_ERROR_TEXT, MAX_TRACEBACK, describe_command, read_error_file, user_env
from tony_py.executor.process import tail

pytestmark = pytest.mark.unit


def test_a_huge_error_file_is_cut_to_what_the_am_accepts(tmp_path):
    path = tmp_path / "err.json"
    path.write_text(json.dumps({"type": "ValueError", "message": "x" * 2_000_000, "traceback": "t" * 2_000_000,
                                "time": 12.5}))
    error = read_error_file(str(path))
    assert error["type"] == "ValueError" and error["time"] == 12.5
    assert len(error["message"]) < MAX_ERROR_TEXT + 100 and "more characters" in error["message"]
    assert len(error["traceback"]) < MAX_TRACEBACK + 100
    # the whole result the executor sends stays well under the AM's body limit
    stderr = tmp_path / "stderr"
    stderr.write_bytes(os.urandom(1 << 20))
    body = {"task": "worker:0", "attempt": 0, "container": "c" * 60, "exit_code": 1, "signal": None,
            "stderr_tail": tail(stderr), "error": error, "metrics": {f"m{i}": 1.0 for i in range(10)}}
    assert len(json.dumps(body).encode()) < MAX_BODY // 4


def test_an_unreadable_error_file_still_says_something(tmp_path):
    path = tmp_path / "err.json"
    path.write_bytes(b"{not json" + b"\xff" * 10)
    assert read_error_file(str(path))["message"].startswith("unreadable error file")
    assert read_error_file(str(tmp_path / "missing.json")) is None


def _zip(path: Path, entries: list[tuple[str, bytes, int]]) -> str:
    with zipfile.ZipFile(path, "w") as zf:
        for name, data, mode in entries:
            info = zipfile.ZipInfo(name)
            info.external_attr = mode << 16
            zf.writestr(info, data)
    return path.name


class SrcFromAm:
    """The AM's side of GET /v1/src, counted."""

    def __init__(self, data: bytes):
        self.data, self.calls = data, 0

    def download_src(self, task: str, dest: Path) -> int:
        self.calls += 1
        dest.write_bytes(self.data)
        return len(self.data)


def test_the_job_files_come_from_the_am_once_and_never_through_a_link(tmp_path):
    settings = SimpleNamespace(task="worker:0", src_zip="tony_src.zip")
    cwd = tmp_path / "container"
    cwd.mkdir()
    zipped = tmp_path / "made.zip"
    _zip(zipped, [("train.py", b"print(1)", 0o100644)])
    am = SrcFromAm(zipped.read_bytes())
    fetch_job_files(am, settings, "<configuration/>", cwd)
    unpack_src(settings.src_zip, cwd)
    assert (cwd / FINAL_CONF).read_text() == "<configuration/>"  # where TonY's tasks find it
    assert (cwd / "train.py").read_text() == "print(1)" and am.calls == 1
    assert not list(cwd.glob(".*.part"))
    fetch_job_files(am, settings, "<changed/>", cwd)  # once there, nothing is fetched or written again
    assert am.calls == 1 and (cwd / FINAL_CONF).read_text() == "<configuration/>"
    # YARN localized the src_dir (too large for the AM) and a link holds the config's name:
    # nothing fetched, nothing written through the links
    other = tmp_path / "other"
    other.mkdir()
    cache = tmp_path / "nm-cache"
    cache.mkdir()
    (other / "tony_src.zip").symlink_to(zipped)
    (other / FINAL_CONF).symlink_to(cache / "f.xml")
    fetch_job_files(am, settings, "<configuration/>", other)
    assert am.calls == 1 and list(cache.iterdir()) == []


def test_on_a_kerberos_cluster_the_job_comes_from_its_localized_files(tmp_path):
    class NoAm:
        def job(self, task):
            raise AssertionError("the AM must not be asked")

    (tmp_path / SPEC_FILE).write_text(json.dumps({"name": "x"}))
    assert load_job(NoAm(), tmp_path, "worker:0") == {"spec": {"name": "x"}, "final_conf": None}
    fetch_job_files(NoAm(), SimpleNamespace(task="worker:0", src_zip=None), None, tmp_path)
    assert not (tmp_path / FINAL_CONF).exists()  # YARN would have linked it; nothing invented


def test_src_dir_never_writes_through_a_localized_link(tmp_path):
    cache = tmp_path / "nm-cache" / "venv"  # the NodeManager's shared copy behind the link
    cache.mkdir(parents=True)
    cwd = tmp_path / "container"
    cwd.mkdir()
    (cwd / "venv").symlink_to(cache)
    name = _zip(cwd / "src.zip", [("train.py", b"x", 0o100644), ("venv/bin/python", b"evil", 0o100755)])
    with pytest.raises(UnpackError, match="venv/bin/python.*'venv'"):
        unpack_src(name, cwd)
    assert list(cache.iterdir()) == []


@pytest.mark.parametrize("entry", ["/venv/x.pth", "../venv/x.pth", "./venv/x.pth", "lib/../../venv/x.pth",
                                   "venv//x.pth", "/etc/x"])
def test_src_dir_entries_zipfile_would_rewrite_are_checked_as_written(tmp_path, entry):
    """zipfile writes '/venv/x' and '../venv/x' as 'venv/x': a check of the raw name let a
    ready-made src zip plant a .pth in the node's cached venv."""
    cache = tmp_path / "nm-cache" / "venv"
    cache.mkdir(parents=True)
    cwd = tmp_path / "container"
    cwd.mkdir()
    (cwd / "venv").symlink_to(cache)
    name = _zip(cwd / "src.zip", [("train.py", b"x", 0o100644), (entry, b"import evil", 0o100644)])
    with pytest.raises(UnpackError, match="src_dir holds"):
        unpack_src(name, cwd)
    assert list(cache.iterdir()) == [] and not (tmp_path / "etc").exists()


def test_src_dir_links_are_skipped_and_modes_masked(tmp_path):
    name = _zip(tmp_path / "src.zip", [
        ("run.sh", b"#!/bin/sh\n", 0o104777),  # setuid, world-writable
        ("data", b"/etc/passwd", stat.S_IFLNK | 0o777),  # a symbolic link entry
        ("lib/util.py", b"pass", 0o100664),
    ])
    unpack_src(name, tmp_path)
    assert stat.S_IMODE((tmp_path / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "lib/util.py").stat().st_mode) == 0o644
    assert not (tmp_path / "data").exists() and not (tmp_path / "data").is_symlink()


def _settings(**overrides) -> Settings:
    values = dict(task="worker:0", am_url="http://am:1", secret="s" * 64, container_id="c1", command="python t.py",
                  execution_env={}, heartbeat_s=1, metrics_interval_s=5, execution_timeout_s=0, registry_timeout_s=0,
                  reserve_tb_port=False, src_zip=None, runtime_dir="/w/tony_runtime", log_dir=Path("."),
                  am_lost_timeout_s=60)
    values.update(overrides)
    return Settings(**values)


def test_shell_env_pythonpath_is_combined_with_the_runtime(tmp_path):
    base = {"PYTHONPATH": "/w/tony_runtime:/w/tony_runtime/deps", "MALLOC_ARENA_MAX": "4", "TONY_SRC_ZIP": "z"}
    env = user_env(_settings(execution_env={"PYTHONPATH": "/data/libs"}), base, {}, 0, tmp_path)
    assert env["PYTHONPATH"] == "/data/libs:/w/tony_runtime"  # the user's first; tony_py.task still importable
    assert "MALLOC_ARENA_MAX" not in env and "TONY_SRC_ZIP" not in env
    assert user_env(_settings(), base, {}, 0, tmp_path)["PYTHONPATH"] == "/w/tony_runtime"


@pytest.mark.parametrize("command,shown", [
    ("/venv/bin/python train.py --password hunter2 --lr 0.1", "train.py"),
    ("python --token s3cr3t train.py", "train.py"),
    ("env KEY=v python t.py", "t.py"),
    ("bash ./scripts/run.sh --key abc", "run.sh"),
    ("python -m torch.distributed.run --nproc 2 /src/train.py", "-m torch.distributed.run"),
    ("python --token s3cr3t", ""),
    ("KEY=abc.py ./trainer --secret=x.sh", ""),
    ("python -c 'import os; print(1)'", ""),
    ("echo 'unbalanced", ""),
])
def test_the_log_line_names_only_a_script_or_module(command, shown):
    """The started line is aggregated with the container's logs: a word of the command may be a
    credential (--token s3cr3t, env KEY=v), so only a .py/.sh base name or a -m module."""
    assert describe_command(command) == shown


def test_settings_carry_what_frameworks_launch_needs(tmp_path):
    from tony_py.config.build import build_job_spec
    from tony_py.config.layers import load_conf

    spec = build_job_spec(load_conf(None, ["tony.containers.command=python t.py", "tony.application.framework=pytorch",
                                           "tony.worker.instances=1", "tony.am.retry-count=4",
                                           "tony.application.max-infrastructure-restarts=3"], env={}, cwd=tmp_path))
    settings = Settings.load({"TONY_TASK": "worker:0", "TONY_AM_URL": "http://am:1"}, spec, "s" * 64)
    # every gang restart counts in TORCHELASTIC_RESTART_COUNT: both budgets bound it
    assert (settings.framework, settings.max_restarts) == ("pytorch", 7)


def test_a_preemptions_deadline_counts_from_when_its_heartbeat_was_sent(tmp_path):
    """The AM says what is left when the heartbeat reached it; the executor counts that from when
    it sent the heartbeat, so a slow answer (or a slow loop before it is acted on) can only make
    the task's deadline earlier than YARN's kill, never later."""
    import time

    from tony_py.executor.supervisor import Executor

    settings = Settings(task="worker:0", am_url="http://am:1", secret="a1" * 32, container_id="container_1_0001_01_000002",
                        command="python t.py", execution_env={}, heartbeat_s=1, metrics_interval_s=5,
                        execution_timeout_s=0, registry_timeout_s=0, reserve_tb_port=False, src_zip=None,
                        runtime_dir="", log_dir=tmp_path, am_lost_timeout_s=5)
    executor = Executor(settings, SimpleNamespace(base_url="http://am:1"), {}, tmp_path)
    terminated = []
    executor.child = SimpleNamespace(terminate_group=lambda: terminated.append(True))
    before = time.time()
    sent_at = time.monotonic() - 3.0  # the heartbeat left 3 s ago: its answer was slow
    after = time.time()
    executor._warn_of_preemption({"deadline": 0, "left_s": 5.0, "sent_at": sent_at}, str(tmp_path / "deadline"))
    assert before + 2.0 - 0.05 <= executor.preempt_deadline <= after + 2.0 + 0.05
    assert float((tmp_path / "deadline").read_text()) == executor.preempt_deadline
    assert terminated == [True]  # SIGTERM to the task's process group, once


def test_kill_group_signals_the_group_before_it_scans_for_strays(monkeypatch):
    """The NodeManager SIGKILLs the executor 250 ms after its SIGTERM, which a scan of the process
    table on a loaded node can outlast: the group has its signal first, then the descendants that
    left the group theirs (one still in it gets none of its own), and the same for SIGKILL."""
    from tony_py.executor import process

    calls, group, dead = [], 4242, []

    def killpg(pgid, sig):
        if sig == 0:  # _group_alive
            if dead:
                raise ProcessLookupError
            return
        calls.append(("group", pgid, sig))
        if sig == signal.SIGKILL:  # the group is gone once it is killed, not before
            dead.append(sig)

    def scan(self):
        calls.append(("scan",))
        return [SimpleNamespace(pid=pid, send_signal=lambda sig, pid=pid: calls.append(("stray", pid, sig)))
                for pid in (5001, 5002)]

    monkeypatch.setattr(process.os, "killpg", killpg)
    monkeypatch.setattr(process.os, "getpgid", {5001: 5001, 5002: group}.__getitem__)  # 5001 ran setsid
    monkeypatch.setattr(process.UserProcess, "_descendants", scan)
    child = object.__new__(process.UserProcess)
    child.pid, child._out, child._err = group, io.BytesIO(), io.BytesIO()
    child.popen = SimpleNamespace(poll=lambda: -signal.SIGKILL if dead else None)
    child.kill_group(grace_s=0.1)
    assert calls == [("group", group, signal.SIGTERM), ("scan",), ("stray", 5001, signal.SIGTERM),
                     ("group", group, signal.SIGKILL), ("stray", 5001, signal.SIGKILL)]


def test_kill_group_ends_the_group_and_a_stray_that_left_it(tmp_path):
    """With real processes: the user process handles SIGTERM (as a trainer saving a checkpoint
    does), here by waiting for its child in a session of its own, which the sweep after the
    group's signal reaches."""
    import psutil

    from tony_py.executor.process import UserProcess

    script = ("import signal, subprocess, sys\n"
              "stray = subprocess.Popen(['sleep', '61.73'], start_new_session=True)\n"
              "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0 if stray.wait(30) == -signal.SIGTERM else 1))\n"
              "open('ready', 'w').close()\n"
              "signal.pause()\n")
    (tmp_path / "user.py").write_text(script)
    child = UserProcess(f"exec {sys.executable} user.py", dict(os.environ), str(tmp_path),
                        tmp_path / "stdout", tmp_path / "stderr")
    deadline = time.monotonic() + 30
    while not (tmp_path / "ready").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    child.kill_group(grace_s=10)
    assert child.returncode == 0 and time.monotonic() - started < 5  # its handler saw the stray end
    left = [p for p in psutil.process_iter(["cmdline", "status"])
            if "61.73" in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE]
    for proc in left:  # not to outlive a failed run
        proc.kill()
    assert not left
