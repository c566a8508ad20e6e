"""Kerberos end to end on the secure local cluster (its own KDC; RPC authenticated, authorized
and encrypted; block tokens; SASL data transfer): every way users submit, tasks that use HDFS with
their delegation tokens only, credentials that are missing or wrong, and a second user."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from secure.conftest import ALICE, FAST, hdfs_io_args
from support import JOBS, PYTHON, ROOT, app_id_in, probe_records, wait_for
from tony_py import api
from tony_py.cluster import secure

BOB = secure.principal("bob")


def status_json(cluster) -> dict:
    out = subprocess.run([PYTHON, "-m", "tony_py.cluster", "status", "--workdir", str(cluster.workdir), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_status_says_the_cluster_is_secure_and_how_to_get_a_ticket(cluster):
    info = status_json(cluster)
    assert info["secure"] is True and info["state"] == "running"
    assert info["user_principal"] == ALICE and os.path.isfile(info["user_keytab"])
    assert os.stat(info["user_keytab"]).st_mode & 0o077 == 0  # keytabs are secrets: 0600
    shown = subprocess.run([PYTHON, "-m", "tony_py.cluster", "status", "--workdir", str(cluster.workdir)],
                           capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert shown.returncode == 0, shown.stderr[-2000:]
    text = shown.stdout
    assert f"export KRB5_CONFIG={info['krb5_conf']}" in text
    assert f"kinit -kt {info['user_keytab']} {ALICE}" in text
    # The daemons really are secure: a client without credentials is refused by the NameNode.
    anonymous = subprocess.run(
        ["java", "-Xmx128m", f"-Djava.security.krb5.conf={info['krb5_conf']}", "-cp",
         f"{cluster.conf_dir}:{cluster.lib_dir}/*", "org.apache.hadoop.fs.FsShell", "-ls", "/"],
        capture_output=True, text=True, timeout=120, env=dict(os.environ, KRB5CCNAME="FILE:/nonexistent"))
    assert anonymous.returncode == 1 and "Client cannot authenticate via:[TOKEN, KERBEROS]" in anonymous.stderr


def test_pytorch_tasks_read_and_write_hdfs_with_their_tokens_only(cluster, tony, hdfs_dir):
    base, gw = hdfs_dir
    run = tony(*hdfs_io_args(cluster, base))  # alice's ticket cache (cluster.env)
    assert run.rc == 0, run.output[-3000:]
    assert cluster.app(run.app_id)["user"] == "alice"
    for i in range(2):
        text = gw.call("read output", gw.fs.readText, f"{base}/out/worker-{i}.txt")
        assert text == f"worker-{i} read forty-two\n"
    # The daemons' OS user owns every log here (docs/kerberos.md#logs): `tony logs`, as alice, finds
    # the task in her history and says why she cannot have its log, not that it has none.
    logs = subprocess.run([PYTHON, "-m", "tony_py.cli", "logs", run.app_id], capture_output=True, text=True,
                          env=cluster.env(), cwd=ROOT, timeout=120)
    assert logs.returncode == 1, logs.stdout + logs.stderr
    assert "job's owner (alice)" in logs.stderr and "LinuxContainerExecutor" in logs.stderr, logs.stderr


def test_pytorch_ddp_example_trains_with_a_ticket_cache(cluster, tony):
    # What is under test is the ticket cache, not the accuracy (tests/integration/test_training_on_hdfs.py)
    run = tony("--src_dir", str(ROOT / "examples/pytorch_ddp"), "--executes", "train.py",
               "--python_binary_path", PYTHON, "--conf_file", str(ROOT / "examples/pytorch_ddp/tony.xml"),
               "--task_params", "--epochs 2 --min_accuracy 0", timeout=400)
    assert run.rc == 0, run.output[-3000:]
    assert cluster.app(run.app_id)["finalStatus"] == "SUCCEEDED"


def test_tensorflow_example_trains_with_principal_and_keytab_and_no_ticket(cluster, tony, tmp_path):
    run = tony("--principal", ALICE, "--keytab", cluster.keytab("alice"),
               "--src_dir", str(ROOT / "examples/tensorflow"), "--executes", "multi_worker.py",
               "--task_params", f"--checkpoint_dir {tmp_path / 'ckpt'} --steps 100 --min_accuracy 0",
               "--python_binary_path", PYTHON,
               "--conf_file", str(ROOT / "examples/tensorflow/multi_worker.xml"),
               "--shell_env", "LD_LIBRARY_PATH=/usr/lib/jvm",
               env={"KRB5CCNAME": f"FILE:{tmp_path / 'no-ticket'}"}, timeout=480)
    assert run.rc == 0, run.output[-3000:]
    assert cluster.app(run.app_id)["user"] == "alice"
    assert list((tmp_path / "ckpt").glob("*-attempt-0/step-100/digits.index"))


def test_python_api_with_principal_and_keytab(cluster, probe_args, tmp_path, monkeypatch):
    for key, value in cluster.env(KRB5CCNAME=f"FILE:{tmp_path / 'no-ticket'}").items():
        monkeypatch.setenv(key, value)
    job = api.submit("probe.py", src_dir=str(JOBS), python_binary_path=PYTHON,
                     task_params=f"--out {tmp_path / 'probe'}", conf={"tony.worker.instances": "1", **dict(
                         c.split("=", 1) for c in FAST[1::2])}, principal=BOB, keytab=cluster.keytab("bob"))
    try:
        assert job.wait(timeout=300) == "SUCCEEDED"
    finally:
        job.close()
    assert cluster.app(job.app_id)["user"] == "bob"
    assert set(probe_records(tmp_path)) == {"worker:0"}


def test_hadoop_jar_with_a_keytab(cluster, tmp_path):
    """`hadoop jar tony-py.jar … --principal --keytab`, exactly as the hadoop script execs it."""
    from tony_py import paths
    from tony_py.bridge import jvm

    env = cluster.env(CLASSPATH=f"{cluster.conf_dir}:{cluster.lib_dir}/*", TONY_CLIENT_PYTHON=PYTHON,
                      TONY_PY_CACHE=str(tmp_path / "cache"), KRB5CCNAME=f"FILE:{tmp_path / 'no-ticket'}")
    cmd = [jvm.java_executable(), "-Xmx256m", *jvm.JDK17_OPENS, "-Dproc_jar", "org.apache.hadoop.util.RunJar",
           str(paths.locate_jar()), "-principal", ALICE, "-keytab", cluster.keytab("alice"),
           "-executes", "probe.py", "-src_dir", str(JOBS), "-python_binary_path", PYTHON,
           "-task_params", f"--out {tmp_path / 'probe'}", "-conf", "tony.worker.instances=1", *FAST]
    proc = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert cluster.app(app_id_in(proc.stdout))["user"] == "alice"


def test_a_schedulers_token_file_alone_submits_and_its_tokens_outlive_the_job(cluster, tony, tmp_path, hdfs_dir):
    """Azkaban and Oozie hand the client HADOOP_TOKEN_FILE_LOCATION and no ticket."""
    base, _ = hdfs_dir
    tokens = tmp_path / "alice.tokens"
    gw = cluster.gateway()
    try:
        gw.bridge.writeTokenFile(str(tokens))
    finally:
        gw.close()
    assert tokens.stat().st_mode & 0o077 == 0
    no_ticket = {"KRB5CCNAME": f"FILE:{tmp_path / 'no-ticket'}", "HADOOP_TOKEN_FILE_LOCATION": str(tokens)}
    run = tony(*hdfs_io_args(cluster, base, workers=1), env=no_ticket)
    assert run.rc == 0, run.output[-3000:]
    assert cluster.app(run.app_id)["user"] == "alice"
    assert "warning" not in run.stderr, run.stderr  # history compacted with the same tokens afterwards
    # The scheduler's tokens still work after the job (the RM did not cancel them at its end): a
    # client with that file and no ticket reads alice's input and asks the RM about the job. (Not a
    # second job: two of them on one token file could outlast its 120 s max lifetime on 2 loaded cores.)
    after = cluster.gateway(**no_ticket)
    try:
        assert after.call("read input", after.fs.readText, f"{base}/input.txt") == "forty-two\n"
        report = after.json("report", after.bridge.report, run.app_id)
    finally:
        after.close()
    assert report["user"] == "alice" and report["final_status"] == "SUCCEEDED", report


@pytest.mark.parametrize("case", ["no ticket", "expired ticket", "wrong keytab", "principal only", "no keytab file",
                                  "token file without RM token"])
def test_without_usable_credentials_exit_2_with_one_line_and_nothing_left(case, cluster, tony, probe_args, tmp_path):
    ccache = tmp_path / "cc"
    env = {"KRB5CCNAME": f"FILE:{ccache}"}
    flags: list[str] = []
    if case == "expired ticket":
        cluster.kinit("alice", ccache, "-l", "2s")
        # expired as klist sees it (the ticket's own end time, whatever lifetime the KDC granted)
        wait_for(lambda: subprocess.run(["klist", "-s", "-c", f"FILE:{ccache}"], timeout=30).returncode != 0,
                 120, "the 2 s ticket to expire")
    elif case == "wrong keytab":
        flags = ["--principal", BOB, "--keytab", cluster.keytab("alice")]
    elif case == "principal only":
        flags = ["--principal", ALICE]
    elif case == "no keytab file":
        flags = ["--principal", ALICE, "--keytab", str(tmp_path / "missing.keytab")]
    elif case == "token file without RM token":
        cluster.kinit("alice", ccache)
        gw = cluster.gateway(KRB5CCNAME=f"FILE:{ccache}")
        try:
            tokens = str(tmp_path / "hdfs-only.tokens")
            gw.bridge.writeTokenFile(tokens)
        finally:
            gw.close()
        ccache.unlink()
        # Keep the HDFS token only, as a scheduler that never fetched an RM token would.
        env["HADOOP_TOKEN_FILE_LOCATION"] = strip_rm_token(cluster, tokens)
    before = {a["id"] for a in cluster.apps()}
    run = tony(*probe_args("tony.worker.instances=1"), *flags, env=env, timeout=120)
    assert run.rc == 2, run.output[-2000:]
    line = run.stderr.strip().splitlines()
    assert len(line) == 1, run.stderr
    expected = {"no ticket": "kinit", "expired ticket": "kinit", "wrong keytab": f"holds no key for {BOB}",
                "principal only": "--principal needs --keytab", "no keytab file": "no such readable file",
                "token file without RM token": "RM_DELEGATION_TOKEN"}[case]
    assert expected in line[0], line[0]
    assert {a["id"] for a in cluster.apps()} == before  # no application
    assert cluster.staging_dirs() == []


def strip_rm_token(cluster, tokens: str) -> str:
    """A copy of a token file without its ResourceManager token (Hadoop's own Credentials API)."""
    out = tokens + ".hdfs"
    gw = cluster.gateway()
    try:
        jvm = gw.gateway.jvm
        conf = jvm.org.apache.hadoop.conf.Configuration()
        creds = jvm.org.apache.hadoop.security.Credentials.readTokenStorageFile(jvm.java.io.File(tokens), conf)
        kept = jvm.org.apache.hadoop.security.Credentials()
        for token in creds.getAllTokens().toArray():
            if str(token.getKind()) != "RM_DELEGATION_TOKEN":
                kept.addToken(token.getService(), token)
        kept.writeTokenStorageFile(jvm.org.apache.hadoop.fs.Path(f"file://{out}"), conf)
    finally:
        gw.close()
    return out


def test_a_second_user_cannot_read_the_first_users_staging_dir_or_history(cluster, tony, probe_args, tmp_path):
    """(`tony logs` on this cluster: test_logs.py.)"""
    release = tmp_path / "release"  # the job runs until the checks made while it runs are done
    run = tony(*probe_args("tony.worker.instances=1", params=f"--until-file {release}"), "--detach")
    assert run.rc == 0 and run.app_id, run.output[-2000:]
    staging = f"/user/alice/.tony/{run.app_id}"
    bob = cluster.gateway(BOB, cluster.keytab("bob"))
    try:
        su = cluster.superuser
        # the secret (for the owner's tony logs and api.attach) and tony-final.xml (for task
        # containers to localize) are staged while the job runs: the superuser sees them
        for name in ("tony-secret", "tony-final.xml"):
            assert su.call("look", su.fs.exists, f"{staging}/{name}")
        for path in (staging, f"{staging}/tony-secret", "/user/alice/.tony/history"):
            with pytest.raises(Exception, match="Permission denied"):
                bob.call("list " + path, bob.fs.listDirs, path)
        assert cluster.app(run.app_id)["finalStatus"] == "UNDEFINED"  # all that while the job ran
    finally:
        bob.close()
        release.touch()
    wait = subprocess.run([PYTHON, "-c", f"from tony_py import api; j = api.attach({run.app_id!r}); "
                                         "print(j.wait(timeout=240)); j.close()"],
                          env=cluster.env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert wait.stdout.strip().endswith("SUCCEEDED"), wait.stdout + wait.stderr
    history = tony_cli(cluster, "history")  # alice's history lists the job
    assert history.returncode == 0 and run.app_id in history.stdout, history.stdout + history.stderr
    # As bob: his own history (home dirs are 0700), which does not hold alice's job.
    bob_cache = tmp_path / "bob.cc"
    cluster.kinit("bob", bob_cache)
    as_bob = tony_cli(cluster, "history", KRB5CCNAME=f"FILE:{bob_cache}")
    assert as_bob.returncode == 0 and run.app_id not in as_bob.stdout, as_bob.stdout + as_bob.stderr


def tony_cli(cluster, *args, **env):
    return subprocess.run([PYTHON, "-m", "tony_py.cli", *args], env=cluster.env(**env), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
