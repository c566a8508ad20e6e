"""hdfs:// from task code on the insecure one-host cluster (tony_py/hdfs.py, hdfs-native): with
`import tony_py.hdfs` and nothing configured, every task of a job submitted as alice (not the
cluster's superuser, the NodeManagers' own user) reads a text file through fsspec.open and a
Parquet dataset through pyarrow.dataset.dataset, both by hdfs:/// URLs (fs.defaultFS of the
container's HADOOP_CONF_DIR), writes as alice, and gets the path and HDFS's reason for a path
that does not exist and for bob's file it may not read (jobs/hdfs_native_io.py). What the tasks
wrote is read back through WebHDFS, not through hdfs-native.
(The same with only the container's tokens: secure/test_hdfs_from_tasks.py; across Docker hosts,
with the token alias shown to matter: secure/test_hosts.py.)"""

from __future__ import annotations

import io
import json
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import requests

from support import JOBS, PYTHON, USER

ROWS = (300, 200)  # two files of the dataset, three row groups each


class WebHdfs:
    """The cluster's NameNode over WebHDFS, as `user` (insecure: user.name says who)."""

    def __init__(self, cluster, user: str):
        self.web, self.user = cluster.nn_web, user

    def call(self, method: str, path: str, op: str, data: bytes | None = None, **params) -> requests.Response:
        resp = requests.request(method, f"{self.web}/webhdfs/v1{path}", data=data, timeout=30,
                                params={"op": op, "user.name": self.user, **params})
        assert resp.ok, f"{op} {path} as {self.user}: {resp.status_code} {resp.text[:500]}"
        return resp

    def put(self, path: str, data: bytes, permission: str = "644") -> None:
        self.call("PUT", path, "CREATE", data, overwrite="true", permission=permission)

    def read(self, path: str) -> bytes:
        return self.call("GET", path, "OPEN").content

    def owner(self, path: str) -> str:
        return self.call("GET", path, "GETFILESTATUS").json()["FileStatus"]["owner"]


def parquet(rows: int, start: int) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({"x": list(range(start, start + rows))}), out, row_group_size=rows // 3 + 1)
    return out.getvalue()


@pytest.fixture
def homes(cluster):
    """/user/alice (alice's) with the job's input, and bob's file only bob may read; removed after."""
    root, alice, bob = WebHdfs(cluster, USER), WebHdfs(cluster, "alice"), WebHdfs(cluster, "bob")
    base, secret = f"/user/alice/hdfs-tasks-{os.getpid()}", f"/user/bob/secret-{os.getpid()}.txt"
    for user, mode in (("alice", "755"), ("bob", "700")):
        root.call("PUT", f"/user/{user}", "MKDIRS")
        root.call("PUT", f"/user/{user}", "SETOWNER", owner=user)
        root.call("PUT", f"/user/{user}", "SETPERMISSION", permission=mode)
    alice.call("PUT", f"{base}/out", "MKDIRS")
    alice.put(f"{base}/input.txt", b"forty-two\n")
    for i, rows in enumerate(ROWS):
        alice.put(f"{base}/data/part-{i}.parquet", parquet(rows, sum(ROWS[:i])))
    bob.put(secret, b"bob's\n", permission="600")
    yield base, secret, alice
    root.call("DELETE", base, "DELETE", recursive="true")
    root.call("DELETE", secret, "DELETE")


def test_tasks_read_hdfs_urls_as_the_jobs_user_and_failures_name_the_path_and_reason(tony, homes):
    base, secret, alice = homes
    run = tony("--src_dir", str(JOBS), "--executes", "hdfs_native_io.py", "--python_binary_path", PYTHON,
               "--task_params", f"{base} --forbidden {secret}", "--conf", "tony.application.framework=pytorch",
               "--conf", "tony.worker.instances=2", "--conf", "tony.am.memory=512m",
               "--conf", "tony.worker.memory=512m", env={"HADOOP_USER_NAME": "alice"})
    assert run.rc == 0, run.output[-3000:]
    total = sum(ROWS)
    for task in ("worker-0", "worker-1"):
        report = json.loads(alice.read(f"{base}/out/{task}.json"))
        assert report["hadoop_user_name"] == "alice" and report["hadoop_conf_dir"], report
        assert report["input"] == "forty-two", report
        assert (report["rows"], report["sum"]) == (total, total * (total - 1) // 2), report
        # the NameNode's own word on who wrote it: the job's user, not the NodeManager's
        assert alice.owner(f"{base}/out/{task}.owner") == report["owner"] == "alice"
        missing = report["missing"]
        assert (missing["type"], missing["errno"], missing["filename"]) == (
            "FileNotFoundError", 2, f"{base}/missing.txt"), missing
        assert "File does not exist" in missing["text"], missing
        denied = report["forbidden"]
        assert (denied["type"], denied["errno"], denied["filename"]) == ("PermissionError", 13, secret), denied
        assert "Permission denied: user=alice, access=" in denied["text"], denied
        assert "\tat " not in denied["text"] and "panic" not in denied["text"].lower(), denied
