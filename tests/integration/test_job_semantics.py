"""TonY's contract on a real cluster: task environment, config layering, success/failure rules."""

import json
import os
import shutil
import threading

from support import JOBS, PYTHON, Background, app_secret, probe_records, wait_for


def only_line(text):
    lines = [l for l in text.strip().splitlines() if l.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_tensorflow_environment(tony, probe_args, tmp_path, cluster):
    (tmp_path / "vocab.txt").write_text("a b c")
    (tmp_path / "shards").mkdir()
    (tmp_path / "shards" / "part-0").write_text("x")
    job = Background(cluster, probe_args(
        "tony.chief.instances=1", "tony.worker.instances=2", "tony.ps.instances=1",
        "tony.evaluator.instances=1", "tony.worker.memory=512m", "tony.ps.memory=512m",
        "tony.chief.memory=512m", "tony.evaluator.memory=512m",
        f"tony.containers.resources={tmp_path / 'vocab.txt'}",
        f"tony.worker.resources={tmp_path / 'shards'}::data",
        params="--forever ps:0 --after-record ps:0 --marker password=hunter2") + [
        "--shell_env", "PROBE_SHELL_ENV=shell", "--container_env", "PROBE_CONTAINER_ENV=container",
        "--shell_env", "PYTHONPATH=/opt/site-libs"])
    # read while the job runs: the AM's container (its token file) goes with the job
    secret = wait_for(lambda: job.app_id and app_secret(cluster, job.app_id), 120, "the AM's credentials")
    run = job.wait()
    assert run.rc == 0, run.output[-3000:]
    rec = probe_records(tmp_path)
    assert len(secret) == 64
    assert sorted(rec) == ["chief:0", "evaluator:0", "ps:0", "worker:0", "worker:1"]
    # task_params may carry credentials: the executor logs the script and an argument count
    for files in cluster.task_logs(run.app_id).values():
        assert "started pid" in files["executor.log"] and "hunter2" not in files["executor.log"]
        # no file of this job is localized into a task container (the AM serves them, the
        # secret is in the container's credentials), only the cached runtime and the user's files
        links = {line.split('" "')[-1].rstrip('"') for line in files["launch_container.sh"].splitlines()
                 if line.startswith("ln -sf")}
        assert links <= {"tony_runtime", "vocab.txt", "data"} and "tony_runtime" in links, links
        assert "fetched src_dir from the AM" in files["executor.log"]
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
        # the app secret is in no variable of the user's env, nor left in its working dir
        assert not [k for k, v in r["all_env"].items() if secret in v], name
        assert "tony-secret" not in r["cwd_files"]
        assert "tony_runtime/deps" not in (r["PYTHONPATH"] or "")  # our py4j/psutil never shadow the user's
        # --shell_env PYTHONPATH comes first and tony_py.task stays importable after it
        assert r["PYTHONPATH"].startswith("/opt/site-libs:") and r["PYTHONPATH"].endswith("/tony_runtime")
        assert "/tony_runtime/tony_py/task.py" in r["tony_py_task_file"]
        assert r["TONY_RESTART_ATTEMPT"] == "0"
        host, port = cluster_spec[job][int(index)].rsplit(":", 1)
        assert host == r["NM_HOST"] and port.isdigit()
        assert "probe.py" in r["cwd_files"]  # src_dir unpacked into the working dir
        assert "tony-final.xml" in r["cwd_files"]  # as in TonY's task containers
        assert "vocab.txt" in r["cwd_files"]  # tony.containers.resources: every task
        assert ("data" in r["cwd_files"]) == (job == "worker")  # tony.worker.resources: workers only
    assert "ps:0" in run.stdout and "STOPPED" in run.stdout


def test_pytorch_environment(tony, probe_args, tmp_path, cluster):
    # a src_dir too large for the AM to serve (tony_py/am/launch.py) reaches tasks through YARN
    src = tmp_path / "src"
    src.mkdir()
    shutil.copy(JOBS / "probe.py", src)
    (src / "weights.bin").write_bytes(os.urandom(9 << 20))
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m", framework="pytorch"),
               "--src_dir", str(src))
    assert run.rc == 0, run.output[-3000:]
    rec = probe_records(tmp_path)
    w0, w1 = rec["worker:0"], rec["worker:1"]
    for files in cluster.task_logs(run.app_id).values():
        assert '"tony_src.zip"' in files["launch_container.sh"]
        assert "fetched src_dir" not in files["executor.log"]
    assert all("weights.bin" in r["cwd_files"] for r in (w0, w1))
    for r in (w0, w1):
        assert r["MASTER_ADDR"] == w0["NM_HOST"]
        assert r["MASTER_PORT"] == w0["MASTER_PORT"] and r["MASTER_PORT"].isdigit()
        assert r["INIT_METHOD"] == f"tcp://{w0['MASTER_ADDR']}:{w0['MASTER_PORT']}"
        assert r["WORLD_SIZE"] == r["WORLD"] == "2"
        assert r["LOCAL_RANK"] == "0"
        assert r["TF_CONFIG"] is None and r["CLUSTER_SPEC"] is None
        # not under torchrun: what it would give an elastic script (the gang attempt, the most
        # gang restarts: tony.am.retry-count 0 + tony.application.max-infrastructure-restarts 10, the job)
        env = r["all_env"]
        assert (env["TORCHELASTIC_RESTART_COUNT"], env["TORCHELASTIC_MAX_RESTARTS"]) == ("0", "10")
        assert env["TORCHELASTIC_RUN_ID"] == run.app_id
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
    # worker:1 never ends by itself: it is STOPPED because the chief failed, however slowly the
    # machine gets there (it slept 60 s before, which a loaded run could outlast)
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           params="--fail worker:0:3 --forever worker:1"))
    assert run.rc == 1, run.output[-3000:]
    assert "finished: FAILED" in run.stdout
    for text in (run.stdout, cluster.app(run.app_id)["diagnostics"]):
        assert "worker:0" in text
        assert "exit code 3" in text
    stderr_tail = "probe worker:0 failing on purpose with exit code 3"
    assert stderr_tail in run.stdout and stderr_tail not in cluster.app(run.app_id)["diagnostics"]
    assert "worker:1 STOPPED" in cluster.app(run.app_id)["diagnostics"]


def test_non_chief_failure_does_not_stop_training_by_default(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           params="--fail worker:1:3 --after-end worker:1"))
    assert run.rc == 0, run.output[-3000:]
    assert "finished: SUCCEEDED" in run.stdout
    assert "some worker tasks failed: worker:1" in run.stdout
    assert "worker:1" in cluster.app(run.app_id)["diagnostics"]


def test_non_chief_failure_fails_the_job_when_enabled(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           "tony.application.fail-on-worker-failure-enabled=true",
                           params="--fail worker:1:3 --forever worker:0"))  # only worker:1's failure ends it
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
    release = tmp_path / "release"
    result = {}

    def submit():
        result["run"] = tony(*probe_args("tony.worker.instances=1", "tony.worker.gpus=1", "tony.worker.memory=512m",
                                         params=f"--until-file {release}"))

    thread = threading.Thread(target=submit)
    thread.start()
    try:
        record = wait_for(lambda: probe_records(tmp_path).get("worker:0"), 120, "the task to start")
        # the task waits for the release file: its row is read while it certainly runs
        task = wait_for(lambda: next((t for t in (cluster.am_status(record["JOB_ID"]) or {}).get("tasks", [])
                                      if t["state"] == "RUNNING"), None), 30, "the AM to show the task RUNNING")
    finally:
        release.touch()
        thread.join(timeout=180)
    assert result["run"].rc == 0, result["run"].output[-3000:]
    assert task["resource"]["yarn.io/gpu"] == 1
    assert task["node_id"] == cluster.gpu_node_id()
    assert record["NM_PORT"] == cluster.gpu_node_id().split(":")[1]


def test_fcfs_job_runs_each_task_as_it_comes(tony, probe_args, tmp_path, cluster):
    run = tony(*probe_args("tony.worker.instances=2", "tony.worker.memory=512m",
                           "tony.application.distributed-mode=FCFS"))
    assert run.rc == 0, run.output[-3000:]
    rec = probe_records(tmp_path)
    assert sorted(rec) == ["worker:0", "worker:1"]
    for r in rec.values():
        assert r["DISTRIBUTED_MODE"] == "FCFS" and r["TF_CONFIG"] is None and r["CLUSTER_SPEC"] is None


def test_a_type_runs_its_own_command(tony, probe_args, tmp_path, cluster):
    ps_command = f"{PYTHON} probe.py --out {tmp_path / 'probe'} --marker from-ps-command --forever ps:0"
    run = tony(*probe_args("tony.worker.instances=1", "tony.ps.instances=1", "tony.worker.memory=512m",
                           "tony.ps.memory=512m", f"tony.ps.command={ps_command}",
                           # the worker ends the job: it waits for the ps's record first (an order, not a race)
                           params="--marker from-executes --after-record ps:0"))
    assert run.rc == 0, run.output[-3000:]
    rec = probe_records(tmp_path)
    assert "from-ps-command" in rec["ps:0"]["argv"] and "from-executes" in rec["worker:0"]["argv"]


def test_a_failed_evaluator_does_not_fail_the_job(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=1", "tony.evaluator.instances=1", "tony.worker.memory=512m",
                           "tony.evaluator.memory=512m", params="--fail evaluator:0:2 --after-end evaluator:0"))
    assert run.rc == 0, run.output[-3000:]
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert "some worker tasks failed: evaluator:0" in diagnostics and "evaluator:0 FAILED" in diagnostics


def test_a_huge_error_file_still_reports_the_exit_code_and_the_error(tony, probe_args, cluster):
    run = tony(*probe_args("tony.worker.instances=1", "tony.worker.memory=512m", params="--huge-error worker:0"))
    assert run.rc == 1, run.output[-3000:]
    diagnostics = cluster.app(run.app_id)["diagnostics"]
    assert "worker:0" in diagnostics and "exit code 3: HugeError: mmmm" in diagnostics
    assert "more characters]" in diagnostics and "lost" not in diagnostics
