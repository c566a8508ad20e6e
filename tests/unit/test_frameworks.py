import json

import pytest

from tony_py import frameworks
from tony_py.config.layers import load_conf
from tony_py.config.build import build_job_spec
from tony_py.config.spec import TaskId
from tony_py.errors import ConfigError


def spec(tmp_path, *overrides):
    conf = load_conf(None, ["tony.containers.command=x", *overrides], env={}, cwd=tmp_path)
    return build_job_spec(conf)


CLUSTER = {
    "chief": ["h0:1000"],
    "worker": ["h1:1001", "h2:1002"],
    "ps": ["h3:1003"],
    "evaluator": ["h4:1004"],
    "tensorboard": ["h5:1005"],
}


def test_tensorflow_env(tmp_path):
    s = spec(tmp_path, "tony.chief.instances=1", "tony.worker.instances=2", "tony.ps.instances=1",
             "tony.evaluator.instances=1", "tony.tensorboard.instances=1")
    env = frameworks.task_env(s, CLUSTER, TaskId("worker", 1))
    assert json.loads(env["CLUSTER_SPEC"]) == CLUSTER
    tf_config = json.loads(env["TF_CONFIG"])
    assert tf_config == {
        "cluster": {"chief": ["h0:1000"], "worker": ["h1:1001", "h2:1002"], "ps": ["h3:1003"]},
        "task": {"type": "worker", "index": 1},
    }
    on_evaluator = json.loads(frameworks.task_env(s, CLUSTER, TaskId("evaluator", 0))["TF_CONFIG"])
    assert on_evaluator["cluster"]["evaluator"] == ["h4:1004"]
    assert "tensorboard" not in on_evaluator["cluster"]


def test_tensorflow_fcfs_sets_no_cluster(tmp_path):
    s = spec(tmp_path, "tony.worker.instances=2", "tony.application.distributed-mode=FCFS")
    assert frameworks.task_env(s, {"worker": ["a:1"]}, TaskId("worker", 0)) == {}


def test_pytorch_env_ranks_are_global(tmp_path):
    s = spec(tmp_path, "tony.application.framework=pytorch", "tony.chief.instances=1", "tony.worker.instances=2")
    envs = {t: frameworks.task_env(s, CLUSTER, TaskId(*t)) for t in [("chief", 0), ("worker", 0), ("worker", 1)]}
    assert [envs[t]["RANK"] for t in envs] == ["0", "1", "2"]
    for env in envs.values():
        assert env["MASTER_ADDR"] == "h0" and env["MASTER_PORT"] == "1000"
        assert env["WORLD_SIZE"] == env["WORLD"] == "3"
        assert env["INIT_METHOD"] == "tcp://h0:1000"
        assert env["LOCAL_RANK"] == "0"
    ps_env = frameworks.task_env(s, CLUSTER, TaskId("ps", 0))
    assert "RANK" not in ps_env and ps_env["MASTER_ADDR"] == "h0"


def test_pytorch_two_workers(tmp_path):
    s = spec(tmp_path, "tony.application.framework=pytorch", "tony.worker.instances=2")
    env = frameworks.task_env(s, {"worker": ["a:1", "b:2"]}, TaskId("worker", 1))
    assert (env["RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == ("1", "2", "a", "1")


def test_jax_env_in_jaxs_and_kubeflows_names(tmp_path):
    s = spec(tmp_path, "tony.application.framework=jax", "tony.chief.instances=1", "tony.worker.instances=2")
    envs = {t: frameworks.task_env(s, CLUSTER, TaskId(*t)) for t in [("chief", 0), ("worker", 0), ("worker", 1)]}
    assert [envs[t]["JAX_PROCESS_ID"] for t in envs] == [envs[t]["PROCESS_ID"] for t in envs] == ["0", "1", "2"]
    for env in envs.values():
        assert env["JAX_COORDINATOR_ADDRESS"] == "h0:1000" and env["JAX_NUM_PROCESSES"] == env["NUM_PROCESSES"] == "3"
        assert (env["COORDINATOR_ADDRESS"], env["COORDINATOR_PORT"]) == ("h0", "1000")
    # process 0 runs the coordinator: on its own address, not on every one (JAX's default [::])
    assert envs[("chief", 0)]["JAX_COORDINATOR_BIND_ADDRESS"] == "h0:1000"
    assert all("JAX_COORDINATOR_BIND_ADDRESS" not in envs[t] for t in [("worker", 0), ("worker", 1)])
    ps_env = frameworks.task_env(s, CLUSTER, TaskId("ps", 0))
    assert "JAX_PROCESS_ID" not in ps_env


@pytest.mark.parametrize("overrides,key", [
    (("tony.worker.instances=2", "tony.application.distributed-mode=FCFS"), "tony.application.distributed-mode"),
    (("tony.ps.instances=1",), "tony.worker.instances"),
])
def test_jax_needs_a_gang_of_trainers(tmp_path, overrides, key):
    with pytest.raises(ConfigError) as err:
        spec(tmp_path, "tony.application.framework=jax", *overrides)
    assert err.value.key == key


def test_standalone_env_is_empty(tmp_path):
    s = spec(tmp_path, "tony.application.framework=standalone", "tony.worker.instances=1")
    assert frameworks.task_env(s, {"worker": ["a:1"]}, TaskId("worker", 0)) == {}
