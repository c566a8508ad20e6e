"""The cluster is real: YARN's own distributed shell runs on both NodeManagers, a GPU request
lands on the GPU node, and HDFS stores and returns data."""

import subprocess
from pathlib import Path

from tony_py.bridge import jvm
from tony_py.cluster.jars import distributedshell_jar


def hadoop_java(cluster, main_class, *args, timeout=180):
    assert cluster.lib_dir is not None, "every test cluster has a Hadoop lib dir (an external one: the cached jars)"
    cmd = [jvm.java_executable(), "-Xmx256m", *jvm.FAST_START_OPTS, *jvm.JDK17_OPENS,
           "-cp", f"{cluster.conf_dir}:{cluster.lib_dir}/*", main_class, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)


def distributed_shell(cluster, *args):
    jar = distributedshell_jar(cluster.lib_dir)
    return hadoop_java(cluster, "org.apache.hadoop.yarn.applications.distributedshell.Client",
                       "-jar", str(jar), "-master_memory", "512", *args)


def shell_outputs(cluster, app_id):
    """{node dir (nm1/nm2): [stdout of each shell container]} from the NodeManagers' log dirs."""
    out = {}
    for cdir in cluster.container_dirs(app_id):
        stdout = cdir / "stdout"
        if stdout.exists() and "hello-from" in stdout.read_text():
            out.setdefault(cdir.parts[-4], []).append(stdout.read_text().strip())
    return out


def app_id_of(output):
    for word in output.replace(",", " ").split():
        if word.startswith("application_"):
            return word.rstrip("/")
    raise AssertionError(f"no application id in:\n{output[-2000:]}")


def test_two_nodemanagers_with_gpus_on_the_first(cluster):
    nodes = cluster.nodes()
    assert len([n for n in nodes if n["state"] == "RUNNING"]) == 2
    gpus = sorted(
        r["value"] for n in nodes for r in n["totalResource"]["resourceInformations"]["resourceInformation"]
        if r["name"] == "yarn.io/gpu"
    )
    assert gpus == [0, 2]


def test_distributed_shell_runs_a_container_on_each_nodemanager(cluster):
    # 8 GB containers on 12 GB nodes: two cannot share a node, so one lands on each.
    proc = distributed_shell(
        cluster, "-num_containers", "2", "-container_memory", "8192",
        "-shell_command", "echo hello-from-$NM_HOST:$NM_PORT",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    output = proc.stdout + proc.stderr
    assert "Application completed successfully" in output
    app_id = app_id_of(output)
    assert cluster.app(app_id)["finalStatus"] == "SUCCEEDED"
    outputs = shell_outputs(cluster, app_id)
    assert sorted(outputs) == ["nm1", "nm2"], outputs


def test_gpu_container_lands_on_the_gpu_node(cluster):
    proc = distributed_shell(
        cluster, "-num_containers", "1", "-container_resources", "memory-mb=256,vcores=1,yarn.io/gpu=1",
        "-shell_command", "echo hello-from-$NM_HOST:$NM_PORT",
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    app_id = app_id_of(proc.stdout + proc.stderr)
    outputs = shell_outputs(cluster, app_id)
    assert list(outputs) == ["nm1"], outputs  # nm1 advertises the GPUs
    gpu_node = cluster.gpu_node_id()
    assert outputs["nm1"][0].endswith(gpu_node.split(":")[1])


def test_hdfs_round_trip(cluster, tmp_path):
    payload = tmp_path / "payload.bin"
    data = bytes(range(256)) * 4096  # 1 MiB
    payload.write_bytes(data)
    remote = f"/tmp/tony-it/roundtrip-{tmp_path.name}.bin"
    mkdir = hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-mkdir", "-p", "/tmp/tony-it")
    assert mkdir.returncode == 0, mkdir.stderr[-2000:]
    put = hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-put", "-f", "-p", str(payload), remote)
    assert put.returncode == 0, put.stderr[-2000:]
    back = tmp_path / "back.bin"
    get = hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-get", remote, str(back))
    assert get.returncode == 0, get.stderr[-2000:]
    assert back.read_bytes() == data
    assert Path(remote).name in cluster.hdfs_list("/tmp/tony-it")
    hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-rm", "-r", "-skipTrash", "/tmp/tony-it")
