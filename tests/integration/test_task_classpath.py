"""TonY's task CLASSPATH on a real cluster (tony_py/executor/hadoop_env.py): every task command
has Hadoop's client jars on CLASSPATH (expanded, as `hadoop classpath --glob` gives them), with
JAVA_HOME and HADOOP_CONF_DIR, so a JVM the task starts with that CLASSPATH alone, as libhdfs
does, reads HDFS; with SKIP_HADOOP_PATH the task's CLASSPATH is left alone and that JVM finds no
Hadoop. (The same read with only the container's tokens: secure/test_task_classpath.py.)"""

from __future__ import annotations

import json
import os
import subprocess

from support import JOBS, PYTHON


def fs_shell(cluster, *args: str) -> None:
    done = subprocess.run(["java", "-Xmx128m", "-cp", f"{cluster.conf_dir}:{cluster.lib_dir}/*",
                           "org.apache.hadoop.fs.FsShell", *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def put(cluster, path: str, text: str, tmp_path) -> None:
    local = tmp_path / "input.txt"
    local.write_text(text)
    fs_shell(cluster, "-mkdir", "-p", path.rsplit("/", 1)[0])
    fs_shell(cluster, "-put", "-f", str(local), path)


def classpath_job(tony, path: str, out, *extra: str):
    return tony("--src_dir", str(JOBS), "--executes", "classpath_read.py", "--python_binary_path", PYTHON,
                "--task_params", f"{path} {out}", "--conf", "tony.worker.instances=1",
                "--conf", "tony.am.memory=512m", "--conf", "tony.worker.memory=512m", *extra)


def test_a_jvm_with_only_the_tasks_classpath_reads_hdfs_and_skip_hadoop_path_opts_out(cluster, tony, tmp_path):
    path = f"/tmp/classpath-{os.getpid()}/{tmp_path.name}.txt"
    put(cluster, path, "forty-two\n", tmp_path)
    try:
        run = classpath_job(tony, path, tmp_path / "on")
        assert run.rc == 0, run.output[-3000:]
        record = json.loads((tmp_path / "on" / "worker:0.json").read_text())
        assert record["rc"] == 0 and record["stdout"] == "forty-two\n", record["stderr"]
        entries = record["CLASSPATH"].split(":")
        assert all("*" not in e for e in entries), entries  # expanded, as --glob gives it: libhdfs needs jars
        assert any(os.path.basename(e).startswith("hadoop-hdfs-client-") for e in entries), entries
        # the NodeManager's own (env whitelist), as on a real node
        assert os.path.isfile(f"{record['JAVA_HOME']}/bin/java"), record["JAVA_HOME"]
        assert os.path.isfile(f"{record['HADOOP_CONF_DIR']}/core-site.xml"), record["HADOOP_CONF_DIR"]

        run = classpath_job(tony, path, tmp_path / "off", "--shell_env", "SKIP_HADOOP_PATH=true")
        assert run.rc == 0, run.output[-3000:]
        record = json.loads((tmp_path / "off" / "worker:0.json").read_text())
        assert not record["CLASSPATH"] and record["rc"] != 0, record
        assert "org.apache.hadoop.fs.FsShell" in record["stderr"]  # could not find or load the main class
    finally:
        fs_shell(cluster, "-rm", "-r", "-f", path.rsplit("/", 1)[0])
