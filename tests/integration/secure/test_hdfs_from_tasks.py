"""hdfs:// from task code on the secure one-host cluster (tony_py/hdfs.py, hdfs-native), with only
the container's delegation tokens: no keytab, no ticket cache in the task. Every task of alice's
job reads a text file through fsspec.open and a Parquet dataset through pyarrow.dataset.dataset,
by hdfs:/// URLs; writes as alice; gets the path and HDFS's reason for a missing path and for
bob's file; and outlives the tokens it started with (TOKEN_MAX_S): once the AM's renewed set
replaced its token file and the first set no longer lets a new connection in, a new connection
reads with the file as it is now (hdfs-native reads the token file at each connection), and the
file system opened at the start still reads (jobs/hdfs_native_io.py). What the tasks wrote is
read back by a Hadoop JVM client as alice.
(Without Kerberos: ../test_hdfs_from_tasks.py; across Docker hosts: test_hosts.py.)"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from secure.conftest import ALICE, FAST, TOKEN_MAX_S
from support import JOBS, PYTHON
from tony_py.cluster import secure

ROWS = (300, 200)
TASKS = ("worker-0", "worker-1")


def put_dataset(gw, base: str, tmp_path) -> None:
    for i, rows in enumerate(ROWS):
        local = tmp_path / f"part-{i}.parquet"
        start = sum(ROWS[:i])
        pq.write_table(pa.table({"x": list(range(start, start + rows))}), local, row_group_size=rows // 3 + 1)
        gw.call("upload", gw.fs.upload, str(local), f"{base}/data/part-{i}.parquet", 0o600)


def test_tasks_read_hdfs_urls_with_their_tokens_only_and_outlive_the_first_set(cluster, tony, hdfs_dir, tmp_path):
    base, gw = hdfs_dir
    put_dataset(gw, base, tmp_path)
    secret = f"/user/bob/secret-{os.getpid()}.txt"
    bob = cluster.gateway(secure.principal("bob"), cluster.keytab("bob"))
    try:
        bob.call("write bob's file", bob.fs.writeText, secret, "bob's\n", 0o600)
        # with alice's keytab, so that the AM renews the job's tokens (with her ticket cache alone
        # the job lives on the tokens it was submitted with)
        run = tony("--principal", ALICE, "--keytab", cluster.keytab("alice"), "--src_dir", str(JOBS),
                   "--executes", "hdfs_native_io.py", "--python_binary_path", PYTHON,
                   "--task_params", f"{base} --forbidden {secret} --outlive-tokens",
                   "--conf", "tony.application.framework=pytorch", "--conf", "tony.worker.instances=2", *FAST,
                   timeout=TOKEN_MAX_S * 2 + 300)
    finally:
        bob.call("remove bob's file", bob.fs.delete, secret, False)
        bob.close()
    assert run.rc == 0, run.output[-3000:]
    total = sum(ROWS)
    for task in TASKS:
        report = json.loads(gw.call("read report", gw.fs.readText, f"{base}/out/{task}.json"))
        assert report["token_file"] and report["hadoop_user_name"] is None, report  # Kerberos: no simple user
        assert report["input"] == "forty-two" and report["owner"] == "alice", report
        assert (report["rows"], report["sum"]) == (total, total * (total - 1) // 2), report
        missing = report["missing"]
        assert (missing["type"], missing["errno"], missing["filename"]) == (
            "FileNotFoundError", 2, f"{base}/missing.txt"), missing
        denied = report["forbidden"]
        assert (denied["type"], denied["errno"], denied["filename"]) == ("PermissionError", 13, secret), denied
        assert "Permission denied: user=alice, access=" in denied["text"], denied
        assert "\tat " not in denied["text"] and "panic" not in denied["text"].lower(), denied
        outlived = report["outlived"]
        # the first set, once it no longer lets a connection in: refused, with what was missing
        old = outlived["old_set"]
        assert old["rc"] == 3 and old["out"].startswith("PermissionError: "), old
        assert "no credentials for HDFS: no HDFS delegation token in HADOOP_TOKEN_FILE_LOCATION" in old["out"], old
        assert (outlived["current_set"]["rc"], outlived["current_set"]["out"]) == (0, "forty-two"), outlived
        assert outlived["first_connection"] == "forty-two", outlived
        print(f"\n[hdfs from tasks] {task}: a renewed set {outlived['renewed_after_s']} s into the task, the first "
              f"set refused {outlived['old_set_refused_after_s']} s in", file=sys.stderr)
    # the NameNode's own word on who wrote them: alice
    owners = fs_shell(cluster, "-stat", "%u", *(f"{base}/out/{task}.owner" for task in TASKS))
    assert owners.split() == ["alice"] * len(TASKS), owners


def fs_shell(cluster, *args: str) -> str:
    """`hdfs dfs ARGS` as alice (her ticket cache), its output."""
    done = subprocess.run(["java", "-Xmx128m", f"-Djava.security.krb5.conf={cluster.info['krb5_conf']}", "-cp",
                           f"{cluster.conf_dir}:{cluster.lib_dir}/*", "org.apache.hadoop.fs.FsShell", *args],
                          capture_output=True, text=True, timeout=120, env=cluster.env())
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout
