"""The executor API obeys only requests signed with the application's secret; Ctrl-C in the
client, at any point, kills the YARN application and leaves nothing behind; an unchanged venv
is neither uploaded nor localized again."""

import http.client
import json
import os
import signal
import subprocess
import threading
import time
import venv
import zipfile
from pathlib import Path
from urllib.parse import urlparse

import pytest
import requests

from support import (PYTHON, ROOT, USER, app_id_in, app_secret, clean_up, container_credentials, probe_records,
                     wait_clean, wait_for)
from tony_py.appsecret import CREDENTIALS_ALIAS, FILE_ALIAS_PREFIX
from tony_py.auth import Signer, call_json, call_signed


def test_api_obeys_only_signed_fresh_requests_and_ctrl_c_kills_the_app(cluster, probe_args, tmp_path):
    args = probe_args("tony.worker.instances=1", "tony.worker.memory=512m", params="--forever worker:0")
    # its own session, so the Ctrl-C below reaches its whole process group, as from a terminal
    client = subprocess.Popen([PYTHON, "-m", "tony_py.submit", *args], cwd=ROOT, env=cluster.env(),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        record = wait_for(lambda: probe_records(tmp_path).get("worker:0"), 120, "the task to start")
        am = f"http://{record['AM_HOST']}:{record['AM_PORT']}"
        app_id = record["JOB_ID"]
        secret = app_secret(cluster, app_id)
        # The AM's job files and the secret came in its credentials, so its container started
        # without a localizer; the task's container holds the secret and none of the AM's files.
        credentials = container_credentials(cluster, app_id)
        am_container = next(c for c in credentials if c.endswith("_01_000001"))
        assert sorted(credentials[am_container]) == [CREDENTIALS_ALIAS] + [
            FILE_ALIAS_PREFIX + name for name in ("tony-final.xml", "tony-job.json", "tony-spec.json")]
        assert len(credentials) == 2 and all(sorted(keys) == [CREDENTIALS_ALIAS] for c, keys in credentials.items()
                                             if c != am_container)
        # it links only the runtime and the jar, cached across jobs by content (a node's first job
        # of a version localizes those once)
        [script] = cluster.workdir.glob(f"data/nm*/logs/{app_id}/{am_container}/launch_container.sh")
        links = {line.rsplit(" ", 1)[-1].strip('"') for line in script.read_text().splitlines()
                 if line.startswith("ln -sf")}
        assert links == {"tony_runtime", "tony-py.jar"}, links
        signer = Signer(secret, "test-client")
        status_before = call_json(signer, am, "GET", "/status.json", None, 5)[1]
        assert [t["state"] for t in status_before["tasks"]] == ["RUNNING"]

        body = {"task": "worker:0", "attempt": 0, "container": "x", "port": 1, "exit_code": 0}
        stranger = Signer("f" * 64, "test-client")  # signs with the wrong secret
        for headers in ({}, {"Authorization": f"Bearer {secret}"}, stranger.sign("POST", "/v1/result", b"{}")[0]):
            for path in ("/v1/register", "/v1/result", "/v1/heartbeat", "/v1/started"):
                resp = requests.post(f"{am}{path}", json=body, headers=headers, timeout=5)
                assert resp.status_code == 401, (path, headers, resp.text)
            for target in ("/v1/spec?task=worker:0&attempt=0&timeout=1", "/v1/job?task=worker:0",
                           "/v1/src?task=worker:0"):
                resp = requests.get(f"{am}{target}", headers=headers, timeout=5)
                assert resp.status_code == 401 and "command" not in resp.text, (target, resp.text)
        # what the executors fetch: the job (signed for the asker) and the small src_dir
        status, job = call_json(signer, am, "GET", "/v1/job?task=worker:0", None, 5)
        assert status == 200 and job["spec"]["name"] and "<configuration>" in job["final_conf"]
        status, src = call_signed(signer, am, "GET", "/v1/src?task=worker:0", None, 5)
        assert status == 200 and src.startswith(b"PK")
        # a correctly signed request is refused the second time: it cannot be replayed
        raw = json.dumps({"task": "worker:0", "attempt": 0, "container": "x"}).encode()
        headers, nonce = signer.sign("POST", "/v1/heartbeat", raw, am.split("://", 1)[1].rstrip("/"))
        first = requests.post(f"{am}/v1/heartbeat", data=raw, headers=headers, timeout=5)
        assert first.status_code == 200 and first.json()["action"] == "exit"  # a stale container: told to go
        signer.check_answer(nonce, 200, first.content, first.headers["X-Tony-Signature"])  # signed for us
        assert requests.post(f"{am}/v1/heartbeat", data=raw, headers=headers, timeout=5).status_code == 401
        # numbers that are not numbers are refused, not waited on for ever
        status, answer = call_json(signer, am, "GET", "/v1/spec?task=worker:0&attempt=0&container=x&timeout=nan",
                                   None, 5)
        assert status == 400 and "finite" in answer["error"]

        status_after = call_json(signer, am, "GET", "/status.json", None, 5)[1]
        assert status_after["tasks"][0]["state"] == "RUNNING"  # nothing changed
        assert status_after["state"] == status_before["state"] and status_after["failures"] == []
        # anyone else (here: not from the web proxy's address) sees states only
        anonymous = anonymous_get(am, "/status.json")
        assert anonymous["tasks"] == [{"name": "worker:0", "type": "worker", "index": 0, "state": "RUNNING",
                                       "tracked": True, "attempt": 0}]
        assert "diagnostics" not in anonymous and "host" not in json.dumps(anonymous["tasks"])
        # the secret appears in no log: not in the launch scripts' env, not in any output
        for log_file in cluster.workdir.glob(f"data/nm*/logs/{app_id}/*/*"):
            assert secret not in log_file.read_text(errors="replace"), log_file

        os.killpg(client.pid, signal.SIGINT)  # what a terminal's Ctrl-C does
        out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
    assert client.returncode == 130, out + err
    app_id = app_id_in(out)
    assert cluster.app(app_id)["state"] == "KILLED"
    assert "killed by the TonY-py client" in cluster.app(app_id)["diagnostics"]


def anonymous_get(base: str, path: str) -> dict:
    """GET from 127.0.0.2: an address that is not YARN's web proxy (which connects from the
    RM's address, 127.0.0.1 on the local cluster)."""
    url = urlparse(base)
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=5, source_address=("127.0.0.2", 0))
    try:
        conn.request("GET", path)
        return json.loads(conn.getresponse().read())
    finally:
        conn.close()


# Where a client is interrupted: once it installed its guard (its first line), then right after
# each mark of its timeline (tony_py/timeline.py), and once it follows its submitted job. Events,
# not delays: on a loaded machine a fixed delay lands in whatever phase the client has reached.
SIGINT_POINTS = ("guard", "imports_done", "jvm_started", "hadoop_client_ready", "cluster_checked",
                 "application_created", "staged", "submitted", "staged_for_reattach", "following")
SIGTERM_POINTS = ("jvm_started", "following")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_at_any_point_kills_the_app_and_leaves_nothing(sig, cluster, probe_args, tmp_path):
    """From the client's first line (checks, JVM start, staging, submit) to a running job: exit
    130, one line, no traceback, the application KILLED, no staging dir, no process."""
    args = probe_args("tony.worker.instances=1", "tony.worker.memory=512m", params="--forever worker:0")
    seen = []
    for point in SIGINT_POINTS if sig == signal.SIGINT else SIGTERM_POINTS:
        timeline = tmp_path / f"timeline-{point}.jsonl"
        client = subprocess.Popen([PYTHON, "-m", "tony_py.submit", *args], cwd=ROOT,
                                  env=cluster.env(TONY_CLIENT_TIMELINE=str(timeline)), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, start_new_session=True)
        out_lines, err_lines = [], []
        readers = [threading.Thread(target=lambda f=f, into=into: into.extend(f), daemon=True)
                   for f, into in ((client.stdout, out_lines), (client.stderr, err_lines))]
        for reader in readers:
            reader.start()
        reached = {"guard": lambda: guard_installed(client.pid),
                   "following": lambda: app_id_in("".join(out_lines))}.get(point, lambda: point in marks(timeline))
        deadline = time.monotonic() + 120
        while not reached() and client.poll() is None:  # polled closely: the signal lands just after the point
            assert time.monotonic() < deadline, f"the client did not reach {point} in 120 s ({marks(timeline)})"
            time.sleep(0.005)
        assert client.poll() is None, f"the client ended before {point} ({marks(timeline)}): {''.join(err_lines)}"
        os.killpg(client.pid, sig)
        try:
            client.wait(timeout=60)
        except subprocess.TimeoutExpired:
            hung = True  # said below, with what the client printed
        else:
            hung = False
        finally:
            if client.poll() is None:
                client.kill()
        for reader in readers:
            reader.join(timeout=10)
        out, err = "".join(out_lines), "".join(err_lines)
        reached_marks = marks(timeline)
        assert not hung, f"the client went on 60 s after the signal at {point} ({reached_marks}):\n{out[-2000:]}\n" \
                         f"{err[-2000:]}"
        # 130, or dead of SIGINT: run with -m, CPython 3.11 ends itself by SIGINT, whatever exit
        # code the program gave, once an interrupt went up through code it exec'd from a string
        # (a dataclass being made, during the imports), even one the program then caught
        assert client.returncode in (130, -signal.SIGINT), (point, reached_marks, client.returncode, out, err)
        assert "Traceback" not in err and "Error" not in err, (point, err)
        app_id = app_id_in(out)
        if app_id:
            assert cluster.app(app_id)["state"] == "KILLED", point
        left = wait_clean(cluster, timeout=30)
        assert not any(left.values()), (point, left)
        seen.append(app_id is not None)
    assert seen[-1], "the interruption after the submit found no application"


def guard_installed(pid: int) -> bool:
    """Whether the client installed its interrupt guard (tony_py/bridge/interrupts.py), the first
    thing it does: the only handler of SIGTERM and SIGHUP in it. A signal sent before that may be
    lost inside the interpreter's own start-up, which no client can see (CI once: a client
    interrupted 1.6 s in on a loaded machine submitted and followed its job; CPython 3.11 went on
    after 2 of 400 SIGINTs sent in its first 60 ms here, as if it never had one)."""
    try:
        with open(f"/proc/{pid}/status") as status:
            caught = int(next(line for line in status if line.startswith("SigCgt:")).split()[1], 16)
    except (OSError, StopIteration, ValueError):
        return False
    return all(caught >> (sig - 1) & 1 for sig in (signal.SIGTERM, signal.SIGHUP))


def marks(timeline: Path) -> list[str]:
    """The phases the client has marked so far (TONY_CLIENT_TIMELINE)."""
    try:
        return [json.loads(line)["phase"] for line in timeline.read_text().splitlines() if line.endswith("}")]
    except OSError:
        return []


def test_leftovers_are_reported_then_removed(cluster):
    """The fixture that judges every test cleans up after reporting, so one test's leak does not
    fail the next ones."""
    cluster.hdfs_mkdir(f"/user/{USER}/.tony/application_1_0001")
    left = wait_clean(cluster, timeout=1)
    assert left["staging"] == ["application_1_0001"]
    clean_up(cluster, left)
    assert not any(wait_clean(cluster, timeout=5).values())


def make_venv_zip(path: Path) -> Path:
    """A real (tiny) virtualenv, zipped the way users ship theirs; the interpreter is copied in."""
    env_dir = path.parent / "venv-src"
    venv.EnvBuilder(with_pip=False, symlinks=False).create(env_dir)
    with zipfile.ZipFile(path, "w") as zf:
        for file in sorted(env_dir.rglob("*")):
            if file.is_file():
                info = zipfile.ZipInfo(str(file.relative_to(env_dir)), date_time=(2020, 1, 1, 0, 0, 0))
                info.external_attr = (file.stat().st_mode & 0o777) << 16
                zf.writestr(info, file.read_bytes())
    return path


def test_unchanged_venv_is_not_uploaded_or_localized_again(tony, probe_args, tmp_path, cluster):
    venv_zip = make_venv_zip(tmp_path / "venv.zip")
    # a GPU request pins the task to the GPU node, so both runs use the same NodeManager
    args = probe_args("tony.worker.instances=1", "tony.worker.gpus=1", "tony.worker.memory=512m")
    args[args.index("--python_binary_path") + 1] = "bin/python"
    args += ["--python_venv", str(venv_zip)]

    first = tony(*args)
    assert first.rc == 0, first.output[-3000:]
    first_record = probe_records(tmp_path)["worker:0"]
    assert first_record["executable"].endswith("/venv/bin/python")  # ran in the shipped venv
    assert not [line for line in first.stdout.splitlines() if line.startswith("reused") and "venv-" in line]

    second = tony(*args)
    assert second.rc == 0, second.output[-3000:]
    second_record = probe_records(tmp_path)["worker:0"]
    reused = second.stdout.split("reused from the cache (not uploaded):", 1)[1].splitlines()[0]
    assert "venv-" in reused
    # the NodeManager localized it once and gave the second job the same copy
    assert second_record["venv_realpath"] == first_record["venv_realpath"]
    assert first.app_id not in first_record["venv_realpath"]  # not in an app-private dir
    # ... but private to the user: cached per user on the node, unreadable to others on HDFS
    assert f"/usercache/{USER}/filecache/" in first_record["venv_realpath"]
    cache = f"/user/{USER}/.tony/cache"
    venv_name = next(n for n in cluster.hdfs_list(cache) if n.startswith("venv-"))
    assert cluster.hdfs_status(cache)["permission"] == "700"
    assert cluster.hdfs_status(f"{cache}/{venv_name}")["permission"] == "600"


def test_hdfs_classpath_files_are_localized_and_on_the_classpath(tony, probe_args, tmp_path, cluster):
    from test_cluster import hadoop_java

    jar = tmp_path / "extra-lib.jar"
    jar.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # an empty zip is a valid (empty) jar
    remote = f"/tmp/tony-it-cp-{tmp_path.name}"
    assert hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-mkdir", "-p", remote).returncode == 0
    assert hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-put", str(jar), remote).returncode == 0
    try:
        run = tony(*probe_args("tony.worker.instances=1", "tony.worker.memory=512m"),
                   "--hdfs_classpath", f"{remote},/tmp/tony-it-missing-dir")
        assert run.rc == 0, run.output[-3000:]
        record = probe_records(tmp_path)["worker:0"]
        assert "extra-lib.jar" in record["cwd_files"]
        assert record["CLASSPATH"].split(":")[0].endswith("/extra-lib.jar")
    finally:
        hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-rm", "-r", "-skipTrash", remote)
