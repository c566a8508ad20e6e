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


# ---- PyTorch under torchrun (tony.<type>.nproc-per-node) ---------------------------------------------
from tony_py.config.torchrun import split_interpreter  # noqa: E402
from tony_py.frameworks import pytorch  # noqa: E402

TORCHRUN_CLUSTER = {"chief": ["h0:1000"], "worker": ["h1:1001", "h1:1002"], "evaluator": ["h4:1004"]}


def torchrun_spec(tmp_path, *overrides):
    conf = load_conf(None, ["tony.containers.command=/venv/bin/python train.py --lr 0.1",
                            "tony.application.framework=pytorch", "tony.chief.instances=1", "tony.worker.instances=2",
                            "tony.evaluator.instances=1", "tony.chief.nproc-per-node=2",
                            "tony.worker.nproc-per-node=2", *overrides], env={}, cwd=tmp_path)
    return build_job_spec(conf)


def test_torchrun_env_names_the_rendezvous_and_nothing_torchrun_sets(tmp_path):
    s = torchrun_spec(tmp_path)
    envs = {t: frameworks.task_env(s, TORCHRUN_CLUSTER, TaskId(*t))
            for t in [("chief", 0), ("worker", 0), ("worker", 1)]}
    common = {"TONY_TORCHRUN_NNODES": "3", "TONY_TORCHRUN_NPROC_PER_NODE": "2",
              "TONY_TORCHRUN_RDZV_ENDPOINT": "h0:1000"}
    assert envs[("chief", 0)] == {**common, "TONY_TORCHRUN_IS_HOST": "true", "TONY_TORCHRUN_LOCAL_ADDR": "h0"}
    assert envs[("worker", 0)] == {**common, "TONY_TORCHRUN_IS_HOST": "false", "TONY_TORCHRUN_LOCAL_ADDR": "h1"}
    assert envs[("worker", 1)] == envs[("worker", 0)]  # two tasks on one host: only the rank-0 task hosts
    # torchrun sets RANK, WORLD_SIZE, MASTER_PORT, … for its workers; an evaluator gets no group to join
    assert frameworks.task_env(s, TORCHRUN_CLUSTER, TaskId("evaluator", 0)) == {}


def _served(env, attempt="0"):
    return {**env, "JOB_ID": "application_17_0042", "TONY_RESTART_ATTEMPT": attempt}


def test_torchrun_argv_for_rank_0_and_rank_1(tmp_path):
    s = torchrun_spec(tmp_path)
    chief = _served(frameworks.task_env(s, TORCHRUN_CLUSTER, TaskId("chief", 0)))
    worker = _served(frameworks.task_env(s, TORCHRUN_CLUSTER, TaskId("worker", 0)))
    flags = ["--nnodes", "3", "--nproc_per_node", "2", "--rdzv_backend", "c10d", "--rdzv_endpoint", "h0:1000",
             "--rdzv_id", "application_17_0042-0"]
    tail = ["--max_restarts", "0"]
    assert pytorch.torchrun_args(chief, "/c/0") == [*flags, "--rdzv_conf", "is_host=true", *tail, "--local_addr",
                                                    "h0", "--log_dir", "/c/0/tony-torchrun"]
    assert pytorch.torchrun_args(worker, "/c/1") == [*flags, "--rdzv_conf", "is_host=false", *tail, "--local_addr",
                                                     "h1", "--log_dir", "/c/1/tony-torchrun"]
    command, env = frameworks.launch("pytorch", s.command_for("worker"), worker, max_restarts=3, workdir="/c/1")
    assert command == ("/venv/bin/python -m torch.distributed.run --nnodes 3 --nproc_per_node 2 --rdzv_backend c10d "
                       "--rdzv_endpoint h0:1000 --rdzv_id application_17_0042-0 --rdzv_conf is_host=false "
                       "--max_restarts 0 --local_addr h1 --log_dir /c/1/tony-torchrun train.py --lr 0.1")
    assert env == worker  # torchrun gives its workers TORCHELASTIC_*, RANK, … itself
    # the next gang attempt meets in another rendezvous
    assert "--rdzv_id application_17_0042-1" in frameworks.launch("pytorch", s.command_for("worker"),
                                                                  _served(worker, "1"), 3, "/c/1")[0]


def test_torchrun_keeps_the_rest_of_the_command_as_written():
    env = _served({pytorch.NNODES: "2", pytorch.NPROC_PER_NODE: "4", pytorch.RDZV_ENDPOINT: "a:1",
                   pytorch.IS_HOST: "true", pytorch.LOCAL_ADDR: "a"})
    command = pytorch.torchrun_command("'venv/bin/python' -m pkg.train --name \"a b\" --out $OUT_DIR", env,
                                       "/data/my dir")
    assert command.startswith("'venv/bin/python' -m torch.distributed.run --nnodes 2 --nproc_per_node 4 ")
    assert command.endswith(" --log_dir '/data/my dir/tony-torchrun' -m pkg.train --name \"a b\" --out $OUT_DIR")


@pytest.mark.parametrize("command,parts", [
    ("python t.py", ("python", "python", "t.py")),
    ("  '/my env/bin/python3'   t.py 'x y' ", ("'/my env/bin/python3'", "/my env/bin/python3", "t.py 'x y' ")),
    ('"venv/bin/python" -m a.b', ('"venv/bin/python"', "venv/bin/python", "-m a.b")),
])
def test_the_interpreter_is_split_off_as_written(command, parts):
    assert split_interpreter(command) == parts


@pytest.mark.parametrize("command", ["python", "python -m", "python -u t.py", "python 'unclosed t.py", ""])
def test_commands_torchrun_cannot_run_are_refused(command):
    with pytest.raises(ValueError):
        split_interpreter(command)


def test_pytorch_tasks_without_torchrun_get_torchelastics_variables(tmp_path):
    s = spec(tmp_path, "tony.application.framework=pytorch", "tony.worker.instances=2", "tony.evaluator.instances=1")
    for task in (TaskId("worker", 1), TaskId("evaluator", 0)):
        env = _served(frameworks.task_env(s, {"worker": ["a:1", "b:2"], "evaluator": ["c:3"]}, task), attempt="2")
        command, launched = frameworks.launch("pytorch", "python t.py", env, max_restarts=5, workdir="/c")
        assert command == "python t.py"
        assert launched == {**env, "TORCHELASTIC_RESTART_COUNT": "2", "TORCHELASTIC_MAX_RESTARTS": "5",
                            "TORCHELASTIC_RUN_ID": "application_17_0042"}
    # other frameworks' tasks run as they are
    assert frameworks.launch("tensorflow", "python t.py", {"JOB_ID": "x"}, 5, "/c") == ("python t.py", {"JOB_ID": "x"})


# ---- one descriptor per framework -------------------------------------------------------------------
def test_every_framework_has_one_descriptor_and_its_traits_decide_the_checks(tmp_path):
    from tony_py.config.traits import FRAMEWORK_TRAITS, FRAMEWORKS

    assert tuple(frameworks.REGISTRY) == FRAMEWORKS == tuple(FRAMEWORK_TRAITS)
    for name, framework in frameworks.REGISTRY.items():
        assert framework.traits is FRAMEWORK_TRAITS[name] and framework.traits.doc
        assert callable(framework.plan) and callable(framework.launch) and callable(framework.ready)
    # each trait is what a check reads: a framework that lacks it is refused its behaviour
    for name, t in FRAMEWORK_TRAITS.items():
        shrinking = ["tony.worker.instances=3", "tony.worker.min-instances=2", f"tony.application.framework={name}"]
        if t.elastic:
            assert spec(tmp_path, *shrinking).type("worker").min_instances == 2
        elif not (t.single_task or t.needs_one or t.chief_type):
            with pytest.raises(ConfigError, match="cannot shrink"):
                spec(tmp_path, *shrinking)
        if t.gang_only:
            with pytest.raises(ConfigError, match=f"{name} needs GANG"):
                spec(tmp_path, "tony.worker.instances=2", f"tony.application.framework={name}",
                     "tony.application.distributed-mode=FCFS", *(["tony.head.instances=1"] if t.chief_type else []))
    # what launch made of the command is named by the traits in the executor's log
    assert frameworks.launch("tensorflow", "python t.py", {"A": "1"}, 0, "/w") == ("python t.py", {"A": "1"})
    assert FRAMEWORK_TRAITS["pytorch"].wrapped and not FRAMEWORK_TRAITS["tensorflow"].wrapped
