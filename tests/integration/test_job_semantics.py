"""TonY's contract on a real cluster: task environment, config layering, success/failure rules."""

import json
import time

from support import probe_records


def only_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_tensorflow_environment(tony, probe_args, tmp_path, cluster):
    (tmp_path / "vocab.txt").write_text("a b c")
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "part-0").write_text("x")
    run = tony(*probe_args("tony.chief.instances=1", "tony.worker.instances=2", "tony.ps.instances=1",
                           "tony.evaluator.instances=1", "tony.worker.memory=512m", "tony.ps.memory=512m",
                           "tony.chief.memory=512m", "tony.evaluator.memory=512m",
                           f"tony.containers.resources={tmp_path / 'vocab.txt'}",
                           f"tony.worker.resources={tmp_path / 'shards'}::data",
                           params="--forever ps:0"),
               "--shell_env", "PROBE_SHELL_ENV=shell", "--container_env", "PROBE_CONTAINER_ENV=container")
    assert run.rc == 0, run.output[-3000:]
    rec = probe_records(tmp_path)
    assert sorted(rec) == ["chief:0", "evaluator:0", "ps:0", "worker:0", "worker:1"]
    cluster_spec = json.loads(rec["chief:0"]["CLUSTER_SPEC"])
    assert sorted(cluster_spec) == ["chief", "evaluator", "ps", "worker"]
    assert [len(cluster_spec[t]) for t in ("chief", "worker", "ps", "evaluator")] == [1, 2, 1, 1]
    for name, r in rec.items():
        job, index = name.split(":")
        assert json.loads(r["CLUSTER_SPEC"]) == cluster_spec
        tf_config = json.loads(r["TF_CONFIG"])
        expected = {k: v for k, v in cluster_spec.items() if k != "evaluator" or job == "evaluator"}
        assert tf_config == {"cluster": expected, "task": {"type": job, "index": int(index)}}
        assert (r["JOB_NAME"], r["TASK_INDEX"]) == (job, index)
        assert r["TASK_NUM"] == "4"  # chief, 2 workers, evaluator; ps is untracked
        assert r["JOB_ID"] == r["appid"] == run.app_id
        assert r["DISTRIBUTED_MODE"] == "GANG"
        assert r["IS_CHIEF"] == ("true" if name == "chief:0" else None)
        assert (r["TB_PORT"] is not None) == (name == "chief:0")
        assert r["AM_HOST"] and r["AM_PORT"]
        assert r["PROBE_SHELL_ENV"] == "shell" and r["PROBE_CONTAINER_ENV"] == "container"
        assert r["MALLOC_ARENA_MAX"] is None  # Hadoop's =4 slows TensorFlow ~3x
        assert r["TONY_APP_SECRET"] is None  # the app secret is not in the user's env...
        assert "tony-secret" not in r["cwd_files"]  # ...nor left in its working dir
        assert "tony_runtime/deps" not in (r["PYTHONPATH"] or "")  # our py4j/psutil never shadow the user's
        assert "/tony_runtime/tony_py/task.py" in r["tony_py_task_file"]  # tony_py.task is importable
        assert r["TONY_RESTART_ATTEMPT"] == "0"
        host, port = cluster_spec[job][int(index)].rsplit(":", 1)
        assert host == r["NM_HOST"] and port.isdigit()
        assert "probe.py" in r["cwd_files"]  # src_dir unpacked into the working dir
        assert "vocab.txt" in r["cwd_files"]  # tony.containers.resources: every task
        assert ("data" in r["cwd_files"]) == (job == "worker")  # tony.worker.resources: workers only
    assert "ps:0" in run.stdout and "STOPPED" in run.stdout


def test_pytorch_environment(tony, probe_args, tmp_path):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m", framework="pytorch"))
    assert run.rc == 0, run.output[-3000:]
    rec = probe_records(tmp_path)
    w0, w1 = rec["worker:0"], rec["worker:1"]
    for r in (w0, w1):
        assert r["MASTER_ADDR"] == w0["NM_HOST"]
        assert r["MASTER_PORT"] == w0["MASTER_PORT"] and r["MASTER_PORT"].isdigit()
        assert r["INIT_METHOD"] == f"tcp://{w0['MASTER_ADDR']}:{w0['MASTER_PORT']}"
        assert r["WORLD_SIZE"] == r["WORLD"] == "2"
        assert r["LOCAL_RANK"] == "0"
        assert r["TF_CONFIG"] is None and r["CLUSTER_SPEC"] is None
    assert (w0["RANK"], w1["RANK"]) == ("0", "1")


def test_conf_beats_site_beats_conf_file_beats_defaults(tony, probe_args, tmp_path, cluster):
    conf_file = tmp_path / "job.xml"
    conf_file.write_text(
        "<configuration>"
        "<property><name>tony.worker.instances</name><value>3</value></property>"
        "<property><name>tony.application.name</name><value>from-conf-file</value></property>"
        "<property><name>tony.execution.envs</name><value>PROBE_SHELL_ENV=from-conf-file</value></property>"
        "</configuration>")
    site = tmp_path / "site"
    site.mkdir()
    (site / "tony-site.xml").write_text(
        "<configuration>"
        "<property><name>tony.worker.instances</name><value>2</value></property>"
        "<property><name>tony.application.name</name><value>from-site</value></property>"
        "</configuration>")
    args = probe_args("tony.worker.memory=512m", "tony.application.name=from-conf") + ["--conf_file", str(conf_file)]
    run = tony(*args, env={"TONY_CONF_DIR": str(site)})
    assert run.rc == 0, run.output[-3000:]
    rec = probe_records(tmp_path)
    assert sorted(rec) == ["worker:0", "worker:1"]  # the site file beats the conf file
    assert rec["worker:0"]["PROBE_SHELL_ENV"] == "from-conf-file"  # the conf file beats the defaults
    assert rec["worker:0"]["DISTRIBUTED_MODE"] == "GANG"  # a built-in default
    assert cluster.app(run.app_id)["name"] == "from-conf"  # --conf beats everything


def test_chief_exit_code_fails_the_job_with_its_stderr(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           params="--fail worker:0:3 --sleep worker:1:60"))
    assert run.rc == 1, run.output[-3000:]
    assert "finished: FAILED" in run.stdout
    for text in (run.stdout, cluster.app(run.app_id)["diagnostics"]):
        assert "worker:0" in text
        assert "exit code 3" in text
        assert "probe worker:0 failing on purpose with exit code 3" in text  # stderr tail
    assert "worker:1 STOPPED" in cluster.app(run.app_id)["diagnostics"]


def test_non_chief_failure_does_not_stop_training_by_default(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           params="--fail worker:1:3 --sleep worker:0:4"))
    assert run.rc == 0, run.output[-3000:]
    assert "finished: SUCCEEDED" in run.stdout
    assert "some worker tasks failed: worker:1" in run.stdout
    assert "worker:1" in cluster.app(run.app_id)["diagnostics"]


def test_non_chief_failure_fails_the_job_when_enabled(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           "tony.application.fail-on-worker-failure-enabled=true",
                           params="--fail worker:1:3 --sleep worker:0:60"))
    assert run.rc == 1, run.output[-3000:]
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert "worker:1" in diagnostics and "exit code 3" in diagnostics


def test_chief_success_stops_ps(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=1", "tony.ps.instances=1", "tony.worker.memory=512m",
                           "tony.ps.memory=512m", params="--forever ps:0 --sleep worker:0:1"))
    assert run.rc == 0, run.output[-3000:]
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert "worker:0 SUCCEEDED" in diagnostics and "ps:0 STOPPED" in diagnostics


def test_gpu_task_gets_a_gpu_container_on_the_gpu_node(tony, probe_args, cluster, tmp_path):
    import threading

    seen = {}
    result = {}

    def submit():
        result["run"] = tony(*probe_args("tony.worker.instances=1", "tony.worker.gpus=1", "tony.worker.memory=512m",
                                         params="--sleep worker:0:8"))

    thread = threading.Thread(target=submit)
    thread.start()
    deadline = time.monotonic() + 120
    while thread.is_alive() and time.monotonic() < deadline and not seen:
        for app in cluster.apps("RUNNING"):
            status = cluster.am_status(app["id"])
            for task in (status or {}).get("tasks", []):
                if task["state"] == "RUNNING" and task.get("resource"):
                    seen.update(task)
        time.sleep(0.5)
    thread.join(timeout=180)
    assert result["run"].rc == 0, result["run"].output[-3000:]
    assert seen, "never saw the task running"
    assert seen["resource"]["yarn.io/gpu"] == 1
    assert seen["node_id"] == cluster.gpu_node_id()
    assert probe_records(tmp_path)["worker:0"]["NM_PORT"] == cluster.gpu_node_id().split(":")[1]
