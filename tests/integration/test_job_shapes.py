"""TonY's less common job shapes on the real cluster, through the real CLI: single-node, stages,
group dependency timeouts, the sidecar TensorBoard, Horovod and MXNet contracts, placement
constraints, and the rest of TonY's keys that change behaviour."""

import json
import os
import signal
import threading

import pytest
import requests

from support import JOBS, PYTHON, USER, Background, probe_records, tasks_running, wait_for
from test_client_and_api import make_venv_zip
from test_cluster import hadoop_java


def env(record, name):
    return record["all_env"].get(name)


# ---- single-node ----------------------------------------------------------------------------------
def test_single_node_job_runs_in_the_am_container(tony, probe_args, tmp_path, cluster):
    run = tony(*probe_args("tony.am.memory=768m"))
    assert run.rc == 0, run.output[-3000:]
    record = probe_records(tmp_path)["driver:0"]
    assert env(record, "PREPROCESSING_JOB") == "true"
    assert os.path.realpath(env(record, "HOME")) == os.path.realpath(env(record, "PWD"))  # TonY: HOME is the cwd
    assert env(record, "TF_CONFIG") is None and env(record, "TB_PORT")  # no cluster, a TensorBoard port
    assert "probe.py" in record["cwd_files"]  # src_dir unpacked beside it
    # it ran in the AM's container: its logs are there, next to am.log
    am_dir = next(d for d in cluster.container_dirs(run.app_id) if (d / "am.log").exists())
    assert {"attempt-0.stdout", "executor.log"} <= {p.name for p in am_dir.iterdir()}
    assert len(cluster.container_dirs(run.app_id)) == 1  # no task container was asked for


def test_single_node_failure_reports_exit_code_and_stderr(tony, probe_args, cluster):
    run = tony(*probe_args(params="--fail driver:0:7"))
    assert run.rc == 1, run.output[-3000:]
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert "Root cause: driver:0" in diagnostics and "exit code 7" in diagnostics
    assert "probe driver:0 failing on purpose with exit code 7" in run.stdout  # its stderr, to its owner


# ---- stages -----------------------------------------------------------------------------------------
STAGED = ("tony.prep.instances=1", "tony.worker.instances=2", "tony.prep.memory=512m", "tony.worker.memory=512m",
          "tony.application.prepare-stage=prep", "tony.application.training-stage=worker")


def test_the_training_stage_starts_after_the_prepare_stage_succeeded(tony, probe_args, tmp_path, cluster):
    run = tony(*probe_args(*STAGED, params="--sleep prep:0:3"))
    assert run.rc == 0, run.output[-3000:]
    records = probe_records(tmp_path)
    prep_end = records["prep:0"]["ended_at"]
    assert all(records[w]["started_at"] > prep_end for w in ("worker:0", "worker:1"))
    # the training gang's cluster spec is the training stage's
    assert json.loads(env(records["worker:1"], "TF_CONFIG"))["cluster"] == json.loads(
        env(records["worker:0"], "CLUSTER_SPEC"))
    assert "prep" not in json.loads(env(records["worker:0"], "CLUSTER_SPEC"))


def test_a_failed_prepare_task_fails_the_job_before_training(tony, probe_args, tmp_path, cluster):
    run = tony(*probe_args(*STAGED, params="--fail prep:0:4"))
    assert run.rc == 1, run.output[-3000:]
    assert "prepare-stage task prep:0" in cluster.app(run.app_id)["diagnostics"]
    assert sorted(probe_records(tmp_path)) == ["prep:0"]  # no training task ever started


# ---- group dependency timeouts ----------------------------------------------------------------------
@pytest.mark.parametrize("ignored", [False, True])
def test_a_group_dependency_timeout(ignored, tony, probe_args, cluster):
    conf = ["tony.chief.instances=1", "tony.worker.instances=1", "tony.evaluator.instances=1",
            "tony.chief.memory=512m", "tony.worker.memory=512m", "tony.evaluator.memory=512m",
            "tony.application.group.A=worker", "tony.application.dependency.evaluator.timeout.after.A=2"]
    if ignored:
        conf.append("tony.application.dependency.evaluator.timeout.after.A.ignored=true")
    # not ignored, the chief runs on: only the dependency timeout can end the job
    params = "--sleep chief:0:8 --forever evaluator:0" if ignored else "--forever chief:0,evaluator:0"
    run = tony(*probe_args(*conf, params=params))
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    if ignored:  # the evaluator is untracked once its group finished: the job ends with the chief
        assert run.rc == 0, run.output[-3000:]
        assert "evaluator:0 STOPPED" in diagnostics
    else:
        assert run.rc == 1, run.output[-3000:]
        assert ("evaluator tasks still running 2 s after every task of group A (worker) finished "
                "(tony.application.dependency.evaluator.timeout.after.A=2)") in diagnostics


def test_an_ignored_timeout_does_not_mask_a_later_real_failure(tony, probe_args, cluster):
    run = tony(*probe_args(
        "tony.chief.instances=1", "tony.worker.instances=1", "tony.evaluator.instances=1", "tony.ps.instances=1",
        "tony.chief.memory=512m", "tony.worker.memory=512m", "tony.evaluator.memory=512m", "tony.ps.memory=512m",
        "tony.application.group.A=worker", "tony.application.dependency.evaluator.timeout.after.A=1",
        "tony.application.dependency.evaluator.timeout.after.A.ignored=true",
        params="--sleep chief:0:30,ps:0:6 --fail ps:0:5 --forever evaluator:0"))
    assert run.rc == 1, run.output[-3000:]
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert "stop-on-failure task ps:0" in diagnostics and "exit code 5" in diagnostics


# ---- sidecar TensorBoard ---------------------------------------------------------------------------
def test_sidecar_tensorboard_serves_what_a_real_tensorflow_task_wrote(tony, tmp_path, cluster):
    """worker:0 writes TensorFlow summaries (a `loss` scalar, 20 steps) into the job's HDFS log
    dir; the sidecar mirrors it and its TensorBoard parses them: its own API lists the run and
    returns the 20 values."""
    log_dir = f"/tmp/tony-it-tb-{tmp_path.name}"
    assert hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-mkdir", "-p", log_dir).returncode == 0
    release = tmp_path / "release"
    result = {}
    job = threading.Thread(target=lambda: result.update(run=tony(
        "--src_dir", str(JOBS), "--executes", "tb_events.py", "--python_binary_path", PYTHON,
        "--task_params", f"{cluster.lib_dir} {release} {tmp_path / 'env'}", "--conf", "tony.application.framework=tensorflow",
        "--conf", "tony.am.memory=512m", "--conf", "tony.worker.instances=2", "--conf", "tony.worker.memory=1g",
        "--conf", "tony.tensorboard.memory=1g", "--sidecar_tensorboard_log_dir", f"hdfs://{log_dir}")))
    job.start()
    try:
        app_id = wait_for(lambda: next((a["id"] for a in cluster.apps("RUNNING")), None), 120, "the job to run")
        url = wait_for(lambda: (cluster.am_status(app_id) or {}).get("tensorboard_url"), 120,
                       "the sidecar to register TensorBoard").rstrip("/")
        # TensorBoard's own reading of the events, once the mirror has them
        loss = wait_for(lambda: _scalars(url, "loss"), 120, "TensorBoard to serve the task's `loss` scalar")
        assert [step for _, step, _ in loss] == list(range(20))
        assert loss[0][2] == 1.0 and abs(loss[-1][2] - 1 / 20) < 1e-6
    finally:
        release.touch()
        job.join(timeout=180)
        hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-rm", "-r", "-skipTrash", log_dir)
    run = result["run"]
    assert run.rc == 0, run.output[-3000:]
    assert f"TensorBoard: {url}" in run.stdout
    records = {p.stem: json.loads(p.read_text()) for p in (tmp_path / "env").glob("*.json")}
    assert sorted(records) == ["worker:0", "worker:1"]
    for r in records.values():
        assert r["TB_LOG_DIR"] == f"hdfs://{log_dir}" and r["TB_PORT"] is None  # the sidecar has it
        assert "tensorboard" not in json.loads(r["TF_CONFIG"])["cluster"]
    assert "tensorboard:0 STOPPED" in cluster.app(run.app_id)["diagnostics"]  # stopped when training ended


def _scalars(url: str, tag: str) -> list | None:
    """[[wall_time, step, value], ...] of the tag in TensorBoard's first run that has it, else None."""
    try:
        tags = requests.get(f"{url}/data/plugin/scalars/tags", timeout=10).json()
        run = next((run for run, run_tags in tags.items() if tag in run_tags), None)
        if run is None:
            return None
        values = requests.get(f"{url}/data/plugin/scalars/scalars", params={"run": run, "tag": tag}, timeout=10).json()
        return values if len(values) == 20 else None
    except (requests.RequestException, ValueError):
        return None


def test_a_sidecar_without_tensorboard_fails_alone_with_one_line(tony, probe_args, tmp_path, cluster):
    args = probe_args("tony.worker.instances=1", "tony.worker.memory=512m", "tony.tensorboard.memory=512m",
                      params="--sleep worker:0:8")
    args[args.index("--python_binary_path") + 1] = "bin/python"  # a venv without TensorBoard
    run = tony(*args, "--python_venv", str(make_venv_zip(tmp_path / "venv.zip")),
               "--sidecar_tensorboard_log_dir", str(tmp_path / "logs"))
    assert run.rc == 0, run.output[-3000:]  # its crash does not fail the job
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert "tensorboard:0" in diagnostics and "TensorBoard is not installed in the job's Python environment" \
        in diagnostics


# ---- Horovod (TonY's test mode) and MXNet: the environment contracts ---------------------------------
def test_horovod_workers_get_the_rendezvous_and_their_slots(tony, probe_args, tmp_path, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m", "tony.horovod.mode.test=true",
                           framework="horovod"))
    assert run.rc == 0, run.output[-3000:]
    records = probe_records(tmp_path)
    assert sorted(records) == ["worker:0", "worker:1"]  # the driver ran TonY-py's own script, not probe.py
    hosts = {env(r, "NM_HOST") for r in records.values()}
    for index, name in enumerate(("worker:0", "worker:1")):
        r = records[name]
        assert env(r, "HOROVOD_CONTROLLER") == env(r, "HOROVOD_CPU_OPERATIONS") == "gloo"
        assert env(r, "HOROVOD_GLOO_RENDEZVOUS_PORT") == "9999"  # TonY's test-mode port
        assert env(r, "HOROVOD_GLOO_RENDEZVOUS_ADDR") == env(r, "NM_HOST")
        assert (env(r, "HOROVOD_RANK"), env(r, "HOROVOD_SIZE")) == (str(index), "2")
        if len(hosts) == 1:  # the local cluster's NodeManagers share one host
            assert (env(r, "HOROVOD_LOCAL_RANK"), env(r, "HOROVOD_LOCAL_SIZE")) == (str(index), "2")
            assert (env(r, "HOROVOD_CROSS_RANK"), env(r, "HOROVOD_CROSS_SIZE")) == ("0", "1")
    assert "driver:0 STOPPED" in cluster.app(run.app_id)["diagnostics"]


def test_horovod_fast_fail_test_mode_fails_the_job_through_its_driver(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           "tony.horovod.mode.test.fast.fail=true", framework="horovod"))
    assert run.rc == 1, run.output[-3000:]
    assert "untracked task driver:0" in cluster.app(run.app_id)["diagnostics"]


def test_mxnet_roles_get_the_dmlc_variables(tony, probe_args, tmp_path, cluster):
    run = tony(*probe_args("tony.scheduler.instances=1", "tony.server.instances=1", "tony.worker.instances=2",
                           "tony.scheduler.memory=512m", "tony.server.memory=512m", "tony.worker.memory=512m",
                           framework="mxnet"))
    assert run.rc == 0, run.output[-3000:]
    records = probe_records(tmp_path)
    scheduler_port = env(records["scheduler:0"], "DMLC_PS_ROOT_PORT")
    for name, r in records.items():
        assert env(r, "DMLC_ROLE") == name.split(":")[0]
        assert env(r, "DMLC_PS_ROOT_PORT") == scheduler_port and env(r, "DMLC_PS_ROOT_URI")
        assert (env(r, "DMLC_NUM_SERVER"), env(r, "DMLC_NUM_WORKER"), env(r, "DMLC_LOCAL")) == ("1", "2", "0")


# ---- placement constraints ------------------------------------------------------------------------
def test_anti_affinity_puts_two_workers_on_different_nodes(tony, probe_args, tmp_path, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           "tony.worker.placement-spec=notin,node,worker"))
    assert run.rc == 0, run.output[-3000:]
    ports = {env(r, "NM_PORT") for r in probe_records(tmp_path).values()}
    assert len(ports) == 2  # one worker per NodeManager


def test_a_placement_spec_yarn_cannot_parse_is_refused_at_submit(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=1", "tony.worker.placement-spec=nowhere,at,all,please"))
    assert run.rc == 2 and "tony.worker.placement-spec" in run.stderr and "not a YARN placement constraint" \
        in run.stderr, run.output


# ---- the rest of TonY's keys -------------------------------------------------------------------------
def test_startup_timeout_kills_an_application_stuck_in_accepted(cluster, probe_args, tmp_path):
    filler = Background(cluster, probe_args("tony.worker.instances=1", "tony.worker.gpus=1",
                                            "tony.worker.memory=512m", "tony.application.name=filler",
                                            params="--forever worker:0"))
    try:
        wait_for(lambda: tasks_running(cluster, filler), 120, "the filler to hold a GPU")
        # the AM needs both GPUs of the only GPU node: it can never start while the filler runs
        stuck = Background(cluster, probe_args("tony.worker.instances=1", "tony.am.gpus=2", "tony.am.startup-timeout=3000"))
        run = stuck.wait(timeout=120)
        assert run.rc == 1, run.output[-3000:]
        assert "tony.am.startup-timeout=3000" in run.stdout
        assert cluster.app(run.app_id)["state"] == "KILLED"
    finally:
        filler.proc.send_signal(signal.SIGINT)
        filler.wait(timeout=60)


def test_priority_lifetime_resources_and_conf_files(tony, probe_args, tmp_path, cluster):
    data = tmp_path / "vocab.txt"
    data.write_text("a")
    hdfs_site = tmp_path / "my-hdfs-site.xml"
    hdfs_site.write_text("<configuration><property><name>tony.test.marker</name><value>1</value></property>"
                         "</configuration>")
    remote = f"/tmp/tony-it-res-{tmp_path.name}"
    for name in ("a.txt", "b.txt"):
        (tmp_path / name).write_text(name)
        assert hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-mkdir", "-p", remote).returncode == 0
        assert hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-put", str(tmp_path / name), remote).returncode == 0
    release = tmp_path / "release"
    try:
        job = Background(cluster, probe_args(
            "tony.worker.instances=1", "tony.worker.memory=512m", "tony.application.priority=3",
            "tony.application.timeout=600000", f"tony.application.hdfs-conf-path={hdfs_site}",
            f"tony.containers.resources={data},,{data},hdfs://{remote}",  # empty and repeated entries, a directory
            params=f"--until-file {release}"))
        wait_for(lambda: tasks_running(cluster, job), 120, "the task to run")
        app = cluster.app(job.app_id)
        assert app["priority"] == 3
        timeouts = requests.get(f"{cluster.rm_web}/ws/v1/cluster/apps/{job.app_id}/timeouts", timeout=5).json()
        lifetime = timeouts["timeouts"]["timeout"][0]
        assert lifetime["type"] == "LIFETIME" and 0 < lifetime["remainingTimeInSeconds"] <= 660
        am_dir = next(d for d in cluster.workdir.glob(f"data/nm*/local/usercache/{USER}/appcache/{job.app_id}/container_*")
                      if (d / "hdfs-site.xml").exists())
        assert "tony.test.marker" in (am_dir / "hdfs-site.xml").read_text()  # the AM reads the job's own file
    finally:
        release.touch()
    run = job.wait(timeout=120)
    hadoop_java(cluster, "org.apache.hadoop.fs.FsShell", "-rm", "-r", "-skipTrash", remote)
    assert run.rc == 0, run.output[-3000:]
    record = probe_records(tmp_path)["worker:0"]
    assert {"vocab.txt", "a.txt", "b.txt"} <= set(record["cwd_files"])
    assert env(record, "SESSION_ID") == env(record, "ATTEMPT_NUMBER") == "0"
