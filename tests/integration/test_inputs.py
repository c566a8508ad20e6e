"""Inputs from everywhere TonY took them: a venv and src_dir on HDFS, archives that YARN unpacks,
a detached submit that returns at once."""

import zipfile

from support import JOBS, probe_records, wait_for
from test_client_and_api import make_venv_zip
from test_cluster import hadoop_java


def hdfs_put(cluster, local, remote_dir):
    assert hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-mkdir", "-p", remote_dir).returncode == 0
    put = hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-put", "-f", str(local), remote_dir)
    assert put.returncode == 0, put.stderr[-2000:]
    return f"hdfs://{remote_dir}/{local.name}"  # hdfs:///path: the cluster's default file system


def zip_dir(directory, target):
    with zipfile.ZipFile(target, "w") as zf:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(directory).as_posix())
    return target


def test_venv_src_dir_and_archives_from_hdfs(tony, probe_args, tmp_path, cluster):
    remote = f"/tmp/tony-it-inputs-{tmp_path.name}"
    venv = hdfs_put(cluster, make_venv_zip(tmp_path / "venv.zip"), remote)
    src = hdfs_put(cluster, zip_dir(JOBS, tmp_path / "src.zip"), remote)
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / "part-0").write_text("x")
    local_archive = zip_dir(data_dir, tmp_path / "local-data.zip")
    remote_archive = hdfs_put(cluster, zip_dir(data_dir, tmp_path / "remote-data.zip"), remote)
    try:
        args = probe_args("tony.worker.instances=1", "tony.worker.memory=512m",
                          f"tony.containers.resources={local_archive}#archive,{remote_archive}::shards#archive")
        args[args.index("--src_dir") + 1] = src
        args[args.index("--python_binary_path") + 1] = "bin/python"
        run = tony(*args, "--python_venv", venv)
        assert run.rc == 0, run.output[-3000:]
        record = probe_records(tmp_path)["worker:0"]
        assert record["executable"].endswith("/venv/bin/python")  # the venv from HDFS ran the task
        assert "probe.py" in record["cwd_files"]  # the src_dir zip from HDFS was unpacked
        assert {"local-data.zip", "shards", "venv"} <= set(record["cwd_dirs"])  # archives arrive unpacked
    finally:
        hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-rm", "-r", "-skipTrash", remote)


def test_detach_returns_the_application_id_and_the_job_runs_on(tony, probe_args, tmp_path, cluster):
    run = tony(*probe_args("tony.worker.instances=1", "tony.worker.memory=512m", params="--sleep worker:0:3"),
               "--detach")
    assert run.rc == 0, run.output
    assert run.stdout.strip().splitlines()[-1] == run.app_id  # scripts read the id from the last line
    assert cluster.app(run.app_id)["state"] in ("ACCEPTED", "RUNNING")
    wait_for(lambda: cluster.app(run.app_id)["state"] == "FINISHED", 120, "the detached job to finish")
    assert cluster.app(run.app_id)["finalStatus"] == "SUCCEEDED"
    # the AM removed the staging dir itself (the autouse fixture checks nothing else is left)
    wait_for(lambda: run.app_id not in cluster.staging_dirs(), 30, "the AM to remove the staging dir")


def test_conf_file_on_hdfs_and_a_remote_src_dir_must_be_a_zip(tony, probe_args, tmp_path, cluster):
    remote = f"/tmp/tony-it-conf-{tmp_path.name}"
    conf = tmp_path / "tony.xml"
    conf.write_text("<configuration><property><name>tony.worker.instances</name><value>2</value></property>"
                    "<property><name>tony.worker.memory</name><value>512m</value></property></configuration>")
    remote_conf = hdfs_put(cluster, conf, remote)
    try:
        run = tony(*probe_args(), "--conf_file", remote_conf)
        assert run.rc == 0, run.output[-3000:]
        assert sorted(probe_records(tmp_path)) == ["worker:0", "worker:1"]  # read through Hadoop's FileSystem
        args = probe_args("tony.worker.instances=1")
        args[args.index("--src_dir") + 1] = f"hdfs://{remote}"  # a directory, not a zip
        refused = tony(*args)
        assert refused.rc == 2 and "a directory on the cluster file system; give a zip of it" in refused.stderr
    finally:
        hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-rm", "-r", "-skipTrash", remote)
