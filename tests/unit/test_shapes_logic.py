"""TonY's job shapes as pure logic: validation of their keys, the plans and environments they
produce, and how the coordinator runs them (fake cluster port, fake clock)."""

import pytest

from harness import Harness, served_cluster
from tony_py import frameworks
from tony_py.am.core.state import JobState
from tony_py.am.launch import JobMeta, TaskLauncher, am_serves_src, job_file_delivery
from tony_py.job.records import TaskState
from tony_py.config.build import build_job_spec
from tony_py.config.layers import load_conf
from tony_py.config.spec import TaskId
from tony_py.errors import ConfigError
from tony_py.frameworks.horovod import host_plan, worker_list


def spec_of(tmp_path, *overrides):
    return build_job_spec(load_conf(None, ["tony.containers.command=python t.py", *overrides], env={}, cwd=tmp_path))


# ---- stages -------------------------------------------------------------------------------------------
def test_stage_keys_as_tonY_reads_them(tmp_path):
    base = ["tony.prep.instances=1", "tony.worker.instances=2", "tony.ps.instances=1"]
    assert spec_of(tmp_path, *base, "tony.application.prepare-stage=prep").stages == (("prep",), ("worker", "ps"))
    assert spec_of(tmp_path, *base, "tony.application.training-stage=worker,ps").stages == (("prep",), ("worker", "ps"))
    assert spec_of(tmp_path, *base).stages == ()


@pytest.mark.parametrize("overrides,words", [
    (["tony.application.prepare-stage=prep", "tony.application.training-stage=worker"], "ps is in neither"),
    (["tony.application.prepare-stage=prep,worker", "tony.application.training-stage=worker,ps"], "in both stages"),
    (["tony.application.prepare-stage=prepp"], "'prepp' is not a job type"),
])
def test_bad_stages_are_refused_naming_the_key(tmp_path, overrides, words):
    with pytest.raises(ConfigError, match=words):
        spec_of(tmp_path, "tony.prep.instances=1", "tony.worker.instances=2", "tony.ps.instances=1", *overrides)


def test_training_is_requested_only_after_the_prepare_stage_succeeded(tmp_path):
    h = Harness(tmp_path, "tony.prep.instances=1", "tony.worker.instances=2", "tony.application.prepare-stage=prep")
    assert h.cluster.requests == [("prep", 1)]
    c = h.allocate("prep")
    h.containers["prep:0"] = c
    h.c.on_started(c)
    h.register("prep:0", 0, c, 2000, None)
    assert served_cluster(h.wait_spec("prep:0", 0, c, 0)) == {"prep": ["host1:2000"]}
    h.task_started("prep:0", 0, c, 1)
    h.result("prep:0")
    assert h.cluster.requests == [("prep", 1), ("worker", 2)] and h.c.state == JobState.ALLOCATING and h.c.stage == 1
    for name in ("worker:0", "worker:1"):
        h.containers[name] = h.allocate("worker")
        h.c.on_started(h.containers[name])
    h.register("worker:0", 0, h.containers["worker:0"], 3000, None)
    h.register("worker:1", 0, h.containers["worker:1"], 3001, None)
    assert h.c.state == JobState.RUNNING
    assert served_cluster(h.wait_spec("worker:1", 0, h.containers["worker:1"], 0)) == {"worker": ["host2:3000", "host3:3001"]}
    h.result("worker:0")
    h.result("worker:1")
    assert h.c.final_status == "SUCCEEDED"


def test_a_failed_prepare_task_fails_the_job_without_training(tmp_path):
    h = Harness(tmp_path, "tony.prep.instances=1", "tony.worker.instances=2", "tony.application.prepare-stage=prep")
    h.containers["prep:0"] = h.allocate("prep")
    h.c.on_started(h.containers["prep:0"])
    h.register("prep:0", 0, h.containers["prep:0"], 2000, None)
    h.result("prep:0", code=2)
    assert h.c.final_status == "FAILED" and "training stage was not started" in h.c.diagnostics()
    assert h.cluster.requests == [("prep", 1)]


# ---- group dependency timeouts ------------------------------------------------------------------------
def test_dependency_keys_need_their_group(tmp_path):
    with pytest.raises(ConfigError, match="no group 'B'"):
        spec_of(tmp_path, "tony.worker.instances=1", "tony.application.dependency.ps.timeout.after.B=5")


def test_a_dependency_timeout_fails_or_untracks(tmp_path):
    conf = ["tony.chief.instances=1", "tony.worker.instances=1", "tony.evaluator.instances=1",
            "tony.application.group.A=worker", "tony.application.dependency.evaluator.timeout.after.A=10",
            "tony.task.max-missed-heartbeats=100000"]
    for ignored in (False, True):
        h = Harness(tmp_path, *conf, *(["tony.application.dependency.evaluator.timeout.after.A.ignored=true"]
                                       if ignored else []))
        h.bring_up()
        h.result("worker:0")
        h.clock.now += 9
        h.c.tick()
        assert h.c.decision is None
        h.clock.now += 2
        h.c.tick()
        if ignored:
            assert h.c.decision is None and not h.c.tasks["evaluator:0"].tracked
            h.result("chief:0")
            assert h.c.final_status == "SUCCEEDED"
        else:
            assert h.c.final_status == "FAILED" and "group A (worker) finished" in h.c.diagnostics()


# ---- Horovod, MXNet, Docker ----------------------------------------------------------------------------
def test_horovod_host_plan_follows_horovods_assignment():
    workers = ["a:1", "b:1", "a:2"]  # worker:0 and worker:2 on host a
    plan = host_plan(workers)
    assert [(p["hostname"], p["rank"], p["local_rank"], p["cross_rank"], p["cross_size"]) for p in plan] == [
        ("a", 0, 0, 0, 2), ("a", 1, 1, 0, 1), ("b", 2, 0, 1, 2)]
    assert worker_list(workers) == "a:2,b:1"


def test_horovod_workers_wait_for_the_driver(tmp_path):
    spec = spec_of(tmp_path, "tony.application.framework=horovod", "tony.worker.instances=3")
    assert spec.type("driver").instances == 1 and "driver" in spec.untracked
    view = {"worker": ["a:1", "b:1", "a:2"], "driver": ["d:9"]}
    assert frameworks.ready(spec, TaskId("driver", 0), {})
    assert not frameworks.ready(spec, TaskId("worker", 0), {})
    env = frameworks.task_env(spec, view, TaskId("worker", 2), {"driver:0": {"host": "d", "port": 4242}})
    assert (env["HOROVOD_RANK"], env["HOROVOD_LOCAL_RANK"], env["HOROVOD_HOSTNAME"]) == ("1", "1", "a")
    assert (env["HOROVOD_GLOO_RENDEZVOUS_ADDR"], env["HOROVOD_GLOO_RENDEZVOUS_PORT"]) == ("d", "4242")
    assert frameworks.task_env(spec, view, TaskId("driver", 0))["CLUSTER_WORKER_LIST"] == "a:2,b:1"


@pytest.mark.parametrize("overrides,key", [
    (["tony.driver.memory=4g"], "tony.driver.memory"),
    (["tony.application.distributed-mode=FCFS"], "tony.application.distributed-mode"),
    (["tony.horovod.driver.mode.debug=true"], "tony.driver.command"),
])
def test_horovod_rules(tmp_path, overrides, key):
    with pytest.raises(ConfigError) as err:
        spec_of(tmp_path, "tony.application.framework=horovod", "tony.worker.instances=2", *overrides)
    assert err.value.key == key


def test_mxnet_needs_one_scheduler_and_sets_dmlc(tmp_path):
    with pytest.raises(ConfigError, match="tony.scheduler.instances"):
        spec_of(tmp_path, "tony.application.framework=mxnet", "tony.worker.instances=2")
    spec = spec_of(tmp_path, "tony.application.framework=mxnet", "tony.scheduler.instances=1",
                   "tony.server.instances=2", "tony.worker.instances=3")
    env = frameworks.task_env(spec, {"scheduler": ["127.0.0.1:9000"]}, TaskId("server", 1))
    assert env == {"DMLC_ROLE": "server", "DMLC_PS_ROOT_URI": "127.0.0.1", "DMLC_PS_ROOT_PORT": "9000",
                   "DMLC_LOCAL": "0", "DMLC_NUM_SERVER": "2", "DMLC_NUM_WORKER": "3"}


def test_docker_settings_reach_the_launch_contexts(tmp_path):
    spec = spec_of(tmp_path, "tony.worker.instances=1", "tony.ps.instances=1", "tony.docker.enabled=true",
                   "tony.docker.containers.image=registry:5000/ml/tf:2.16", "tony.docker.ps.image=ml/ps@sha256:" + "a" * 64,
                   "tony.docker.am.image=ml/am:1", "tony.docker.containers.mount=/etc/passwd:/etc/passwd:ro,/data:/data:rw")
    h = Harness(tmp_path, "tony.worker.instances=1")
    launcher = TaskLauncher(spec, JobMeta("app_1", "/s", "u", {}, [], "python3"), "am", 1)
    worker = launcher.env(h.c.tasks["worker:0"])
    assert worker["YARN_CONTAINER_RUNTIME_TYPE"] == "docker"
    assert worker["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"] == "registry:5000/ml/tf:2.16"
    assert worker["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] == "/etc/passwd:/etc/passwd:ro,/data:/data:rw"
    from tony_py.am.core.tasks import Task
    assert launcher.env(Task(TaskId("ps", 0), tracked=False))["YARN_CONTAINER_RUNTIME_DOCKER_IMAGE"].startswith("ml/ps@")
    assert spec.docker_am_image == "ml/am:1"


@pytest.mark.parametrize("override,key", [
    ("tony.docker.containers.image=Bad Image", "tony.docker.containers.image"),
    ("tony.docker.containers.image=img$(id)", "tony.docker.containers.image"),
    ("tony.docker.containers.mount=/a:/b", "tony.docker.containers.mount"),
    ("tony.docker.containers.mount=/a:/b:rx", "tony.docker.containers.mount"),
])
def test_docker_values_are_checked(tmp_path, override, key):
    conf = ["tony.worker.instances=1", "tony.docker.enabled=true", "tony.docker.containers.image=ok/img:1", override]
    with pytest.raises(ConfigError) as err:
        spec_of(tmp_path, *conf)
    assert err.value.key == key


# ---- sidecar, single node, placement, env parity -------------------------------------------------------
def test_the_sidecar_takes_tb_port_from_the_chief(tmp_path):
    spec = spec_of(tmp_path, "tony.worker.instances=2", "tony.application.tensorboard-log-dir=hdfs:///logs")
    tb = spec.type("tensorboard")
    assert (tb.instances, tb.resources.vcores, tb.resources.memory_mb) == (1, 2, 2048)
    assert spec.tb_port_task() == TaskId("tensorboard", 0) and not spec.is_tracked("tensorboard")
    assert spec.execution_env["TB_LOG_DIR"] == "hdfs:///logs"
    assert spec_of(tmp_path, "tony.worker.instances=2").tb_port_task() == TaskId("worker", 0)


def test_placement_specs_get_their_type_as_allocation_tag(tmp_path):
    spec = spec_of(tmp_path, "tony.worker.instances=2", "tony.worker.placement-spec=notin,node,worker")
    assert spec.type("worker").allocation_tags == ("worker",)
    with pytest.raises(ConfigError, match="tony.worker.node-label"):
        spec_of(tmp_path, "tony.worker.instances=2", "tony.worker.placement-spec=notin,node,worker",
                "tony.worker.node-label=gpu")


def test_one_placed_type_makes_every_type_a_scheduling_request(tmp_path):
    """YARN's CapacityScheduler ignores the SchedulingRequests of an allocate call that also
    carries ResourceRequests (the placed workers of a job with a plain ps never came): a job with
    a placement spec asks for all its types by constraint, so none may use a node label."""
    placed = spec_of(tmp_path, "tony.worker.instances=2", "tony.ps.instances=1",
                     "tony.worker.placement-spec=notin,node,worker")
    assert placed.scheduling_requests and placed.type("ps").placement_spec is None
    assert not spec_of(tmp_path, "tony.worker.instances=2", "tony.ps.instances=1").scheduling_requests
    with pytest.raises(ConfigError, match="tony.ps.node-label.*tony.worker.placement-spec"):
        spec_of(tmp_path, "tony.worker.instances=2", "tony.ps.instances=1", "tony.ps.node-label=cpu",
                "tony.worker.placement-spec=notin,node,worker")
    with pytest.raises(ConfigError, match="tony.application.node-label"):
        spec_of(tmp_path, "tony.worker.instances=2", "tony.application.node-label=cpu",
                "tony.worker.placement-spec=notin,node,worker")


def test_session_id_and_attempt_number_follow_the_gang_attempt(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=1", "tony.am.retry-count=1")
    h.bring_up()
    env = h.wait_spec("worker:0", 0, h.containers["worker:0"], 0)["env"]
    assert env["SESSION_ID"] == env["ATTEMPT_NUMBER"] == "0"
    h.result("worker:0", code=None, signal="SIGKILL")
    h.register("worker:0", 1, h.containers["worker:0"], 3000, None)
    env = h.wait_spec("worker:0", 1, h.containers["worker:0"], 0)["env"]
    assert env["SESSION_ID"] == env["ATTEMPT_NUMBER"] == env["TONY_RESTART_ATTEMPT"] == "1"
    assert h.c.tasks["worker:0"].state == TaskState.REGISTERED


def test_a_task_container_starts_the_executor_bare_with_the_ams_patience(tmp_path):
    spec = spec_of(tmp_path, "tony.worker.instances=2")
    h = Harness(tmp_path, "tony.worker.instances=2")
    meta = JobMeta("app_1", "/s", "u", {}, [], "/usr/bin/python3", src_zip="tony_src.zip", src_from_am=True)
    launch = TaskLauncher(spec, meta, "am", 1).build(h.c.tasks["worker:0"])
    assert launch["env"]["TONY_SRC_ZIP"] == "tony_src.zip" and launch["env"]["TONY_AM_LOST_TIMEOUT_S"] == "60"
    assert launch["commands"] == ["/usr/bin/python3 -S -m tony_py.executor 1>><LOG_DIR>/executor.log 2>&1"]


@pytest.mark.parametrize("size,tasks,served", [
    (0, 1, True), (100_000, 2000, True), (8 << 20, 32, True),  # 8 MiB to 32 tasks: 256 MiB in all
    ((8 << 20) + 1, 1, False), (8 << 20, 33, False), (1 << 20, 257, False),
])
def test_the_am_serves_src_dir_while_it_costs_little(size, tasks, served):
    assert am_serves_src(size, tasks) is served


@pytest.mark.parametrize("kerberos,single_node,src_size,expected", [
    # the usual case: nothing of the job is localized (the runtime is cached per node)
    (False, False, 1000, (True, True, [])),
    (False, False, None, (True, False, [])),  # no src_dir
    (False, False, 9 << 20, (True, False, ["tony_src.zip"])),  # too large for the AM
    (False, True, 1000, (True, False, ["tony_src.zip"])),  # single node: the AM's container has it anyway
    # Kerberos: the signed channel does not encrypt, so YARN localizes them as before
    (True, False, 1000, (False, False, ["tony_src.zip", "tony-final.xml", "tony-spec.json"])),
])
def test_where_a_task_gets_its_jobs_files(kerberos, single_node, src_size, expected):
    src_link = None if src_size is None else "tony_src.zip"
    assert job_file_delivery(kerberos, single_node, src_link, src_size or 0, tasks=4) == expected
