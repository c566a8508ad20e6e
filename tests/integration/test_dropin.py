"""The drop-in for TonY users, on the local cluster: the jar's driver the ways TonY was started
(`java -cp … ClusterSubmitter`, `hadoop jar`, Dataproc's `--class` form), with a client Python
that has nothing installed (the jar carries TonY-py's client), and the Python API."""

from __future__ import annotations

import os
import signal
import subprocess
import venv
from pathlib import Path

import pytest

from support import JOBS, PYTHON, ROOT, app_id_in, probe_records, wait_for
from tony_py import api, paths
from tony_py.bridge import jvm


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory) -> str:
    """A fresh venv: no tony_py, no py4j, nothing but the standard library."""
    target = tmp_path_factory.mktemp("bare") / "venv"
    venv.EnvBuilder(with_pip=False).create(target)
    python = str(target / "bin" / "python")
    assert subprocess.run([python, "-c", "import py4j"], capture_output=True).returncode == 1  # ImportError
    return python


@pytest.fixture
def driver(cluster, bare_python, tmp_path):
    """Run the jar's driver as TonY users do; returns (rc, stdout, stderr, app_id)."""
    jar = str(paths.locate_jar())
    lib = f"{cluster.lib_dir}/*"

    def run(*args, mode="java-cp", extra_env=None, timeout=300, signal_after=None, sig=signal.SIGINT, group=True):
        env = dict(os.environ, TONY_CLIENT_PYTHON=bare_python, TONY_PY_CACHE=str(tmp_path / "cache"))
        env.pop("HADOOP_CONF_DIR", None)
        env.update(extra_env or {})
        java = [jvm.java_executable(), "-Xmx256m", *jvm.JDK17_OPENS]
        if mode == "java-cp":  # TonY's README: java -cp "`hadoop classpath --glob`:tony/*:tony" ClusterSubmitter
            cmd = java + ["-cp", f"{cluster.conf_dir}:{lib}:{jar}", "com.linkedin.tony.cli.ClusterSubmitter", *args]
        else:  # `hadoop jar`, exactly as the hadoop script execs it: CLASSPATH env, conf dir first, RunJar
            env.update(CLASSPATH=f"{cluster.conf_dir}:{lib}", HADOOP_CONF_DIR=str(cluster.conf_dir))
            # RunJar unpacks into java.io.tmpdir: this test's own, so that what it finds there is
            # this driver's (another test's `hadoop jar` may run beside it)
            (tmp_path / "jvm-tmp").mkdir(exist_ok=True)
            cmd = java + [f"-Djava.io.tmpdir={tmp_path / 'jvm-tmp'}", "-Dproc_jar", "-Djava.net.preferIPv4Stack=true", "-Dhadoop.root.logger=INFO,console",
                          "org.apache.hadoop.util.RunJar", jar, *([] if mode == "hadoop-jar-bare" else
                                                                 ["com.linkedin.tony.cli.ClusterSubmitter"]), *args]
        proc = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        if signal_after is not None:
            signal_after(proc)
            (os.killpg if group else os.kill)(proc.pid, sig)
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGINT)
            out, err = proc.communicate(timeout=60)
            raise AssertionError(f"the driver did not finish within {timeout} s:\n{out[-3000:]}{err[-3000:]}")
        return proc.returncode, out, err, app_id_in(out)

    return run


def probe_flags(tmp_path, *conf, params=""):
    flags = ["-executes", "probe.py", "-src_dir", str(JOBS), "-python_binary_path", PYTHON,
             "-task_params", f"--out {tmp_path / 'probe'} {params}".strip(), "-conf", "tony.am.memory=512m"]
    for c in conf:
        flags += ["-conf", c]
    return flags


def test_tonys_readme_command_line_trains_the_tensorflow_example(driver, cluster, tmp_path):
    rc, out, err, app_id = driver(
        "-executes", "multi_worker.py", "-task_params", f"--checkpoint_dir {tmp_path / 'ckpt'}",
        "-python_binary_path", PYTHON, "-src_dir", str(ROOT / "examples/tensorflow"),
        "-conf_file", str(ROOT / "examples/tensorflow/multi_worker.xml"),
        "-shell_env", "LD_LIBRARY_PATH=/usr/lib/jvm", timeout=480)
    assert rc == 0, out[-3000:] + err[-3000:]
    assert cluster.app(app_id)["finalStatus"] == "SUCCEEDED"
    assert list((tmp_path / "ckpt").glob("*-attempt-0/step-800/digits.index"))


@pytest.mark.parametrize("mode,client_loader", [("hadoop-jar", False), ("hadoop-jar", True), ("hadoop-jar-bare", False)])
def test_hadoop_jar(mode, client_loader, driver, cluster, tmp_path):
    extra = {"HADOOP_USE_CLIENT_CLASSLOADER": "true"} if client_loader else {}
    (tmp_path / "jvm-tmp").mkdir()
    made_ns = (tmp_path / "jvm-tmp").stat().st_mtime_ns
    rc, out, err, app_id = driver(*probe_flags(tmp_path, "tony.worker.instances=1", "tony.worker.memory=512m"),
                                  mode=mode, extra_env=extra)
    assert rc == 0, out[-3000:] + err[-3000:]
    assert cluster.app(app_id)["finalStatus"] == "SUCCEEDED"
    assert list((tmp_path / "cache").glob("runtime-*/tony_py/submit.py"))  # the bundled client, unpacked once
    # RunJar's copy was made there (the directory changed) and is gone with the driver
    jvm_tmp = tmp_path / "jvm-tmp"
    assert jvm_tmp.stat().st_mtime_ns > made_ns
    unjarred = list(jvm_tmp.glob("hadoop-unjar*"))
    assert unjarred == [], unjarred


def test_dataproc_form_with_properties_and_the_job_tag(driver, cluster, tmp_path):
    rc, out, err, app_id = driver(
        "-Dmapreduce.job.tags=dataproc_job_5f0c1e", "-D", "tony.worker.instances=1",
        f"--src_dir={JOBS}", "--executes", "probe.py", f"--python_binary_path={PYTHON}",
        f"--task_params=--out {tmp_path / 'probe'}", "--conf=tony.worker.memory=512m", "--conf=tony.am.memory=512m")
    assert rc == 0, out[-3000:] + err[-3000:]
    app = cluster.app(app_id)
    assert app["finalStatus"] == "SUCCEEDED"
    assert "dataproc_job_5f0c1e" in app["applicationTags"].split(",")  # Dataproc links its job by this tag
    assert "\x1b[" not in out  # not a terminal: plain lines, no escape codes


def test_a_failing_job_exits_1_with_the_root_cause(driver, tmp_path):
    rc, out, err, _ = driver(*probe_flags(tmp_path, "tony.worker.instances=1", "tony.worker.memory=512m",
                                          params="--fail worker:0:9"))
    assert rc == 1, out[-3000:] + err[-3000:]
    assert "Root cause: worker:0" in out and "exit code 9" in out


def test_bad_flags_exit_2_and_create_nothing(driver, cluster, tmp_path):
    apps = len(cluster.apps())
    rc, out, err, _ = driver("-executes", "probe.py", "-src_dir", "/no/such/dir")
    assert rc == 2 and "--src_dir /no/such/dir" in err, out + err
    assert len(cluster.apps()) == apps and cluster.staging_dirs() == []


def test_an_old_python_is_refused_with_one_line(driver, tmp_path):
    old = tmp_path / "python3.8"
    old.write_text("#!/bin/sh\necho 3.8\n")
    old.chmod(0o755)
    rc, out, err, _ = driver("-executes", "x.py", extra_env={"TONY_CLIENT_PYTHON": str(old)})
    assert rc == 2, out + err
    assert err.strip().splitlines() == [
        f"tony-py: error: {old} is Python 3.8; TonY-py's client needs Python 3.11 or newer: point at one with "
        "-Dtony.client.python=/path/to/python3 or TONY_CLIENT_PYTHON"]


@pytest.mark.parametrize("sig,group,code", [(signal.SIGINT, True, 130), (signal.SIGTERM, False, 143),
                                            (signal.SIGKILL, False, -9)])
def test_signals_to_the_driver_kill_the_application(sig, group, code, driver, cluster, tmp_path):
    """SIGINT to the terminal's process group, SIGTERM to the driver alone (a scheduler killing
    it), SIGKILL to the driver alone: in each case the application ends KILLED, and the driver's
    exit is the signal's (128 + its number; a SIGKILLed JVM runs no code at all)."""
    def once_running(_proc):
        wait_for(lambda: probe_records(tmp_path).get("worker:0"), 120, "the task to run")

    rc, out, err, app_id = driver(*probe_flags(tmp_path, "tony.worker.instances=1", "tony.worker.memory=512m",
                                               params="--forever worker:0"),
                                  signal_after=once_running, sig=sig, group=group)
    app_id = probe_records(tmp_path)["worker:0"]["JOB_ID"]
    assert rc == code, (rc, out[-2000:], err[-2000:])
    wait_for(lambda: cluster.app(app_id)["state"] == "KILLED", 60,
             f"the application to be killed; the driver said:\n{out[-2000:]}{err[-2000:]}")


def test_python_api_submit_status_wait_and_kill(cluster, probe_args, tmp_path, monkeypatch):
    monkeypatch.setenv("HADOOP_CONF_DIR", str(cluster.conf_dir))
    release = tmp_path / "release"
    args = probe_args("tony.worker.instances=2", "tony.worker.memory=512m", params=f"--until-file {release}")
    flags = dict(zip(args[::2], args[1::2]))
    conf = [v for k, v in zip(args[::2], args[1::2]) if k == "--conf"]
    with api.submit(flags["--executes"], src_dir=flags["--src_dir"], python_binary_path=flags["--python_binary_path"],
                    task_params=flags["--task_params"], conf=conf) as job:
        assert job.app_id.startswith("application_") and job.tracking_url
        seen = set()

        def running():
            status = job.status()
            seen.add(status.job_state)
            return all(t.state == "RUNNING" for t in status.tasks) and len(status.tasks) == 2 and status

        status = wait_for(running, 120, "both tasks to run, seen through the API")
        assert [t.name for t in status.tasks] == ["worker:0", "worker:1"] and status.tasks[0].host
        assert "RUNNING" in seen
        release.touch()
        assert job.wait(timeout=120) == "SUCCEEDED"
    # a second job, killed through a handle attached by its id
    second = api.submit(flags["--executes"], src_dir=flags["--src_dir"], python_binary_path=flags["--python_binary_path"],
                        task_params=f"--out {tmp_path / 'second'} --forever worker:0",
                        conf=["tony.worker.instances=1", "tony.worker.memory=512m", "tony.am.memory=512m"])
    second.close()
    with api.attach(second.app_id) as job:
        wait_for(lambda: job.status().yarn_state == "RUNNING", 120, "the second job to run")
        job.kill()
        assert job.status().final_status == "KILLED"
    with pytest.raises(api.ConfigError, match="tony.worker.memory"):  # the CLI's messages, as exceptions
        api.submit("probe.py", src_dir=flags["--src_dir"], conf={"tony.worker.instances": "1",
                                                                 "tony.worker.memory": "lots"})
