import textwrap

import pytest

from tony_py.config.layers import load_conf
from tony_py.config.build import build_job_spec
from tony_py.config.values import parse_memory_mb
from tony_py.config.fit import check_fits
from tony_py.config.spec import TaskId
from tony_py.errors import ConfigError, UsageError


def write(path, props):
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    path.write_text(f"<?xml version='1.0'?><configuration>{body}</configuration>")
    return path


def spec_from(tmp_path, overrides=(), conf_file=None, env=None):
    conf = load_conf(conf_file, ["tony.containers.command=python x.py", *overrides], env=env or {}, cwd=tmp_path)
    return build_job_spec(conf)


@pytest.mark.parametrize("text,mb", [("2g", 2048), ("2048m", 2048), ("2048", 2048), ("1.5g", 1536),
                                     ("512M", 512), ("1G", 1024), ("3gb", 3072), ("1048576k", 1024)])
def test_memory_strings(text, mb):
    assert parse_memory_mb(text, "k") == mb


@pytest.mark.parametrize("text", ["", "two gigs", "-1g", "0", "2x", "g"])
def test_bad_memory_strings_name_the_key(text):
    with pytest.raises(ConfigError) as err:
        parse_memory_mb(text, "tony.worker.memory")
    assert "tony.worker.memory" in str(err.value)


def test_layering_conf_beats_site_beats_conf_file_beats_defaults(tmp_path):
    conf_file = write(tmp_path / "job.xml", {"tony.worker.instances": "2", "tony.worker.memory": "3g",
                                             "tony.worker.vcores": "2", "tony.yarn.queue": "q1"})
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    write(site_dir / "tony-site.xml", {"tony.worker.memory": "4g", "tony.yarn.queue": "q2"})
    spec = spec_from(tmp_path, ["tony.yarn.queue=q3"], conf_file=str(conf_file),
                     env={"TONY_CONF_DIR": str(site_dir)})
    worker = spec.type("worker")
    assert worker.instances == 2  # conf_file beats defaults
    assert worker.resources.vcores == 2
    assert worker.resources.memory_mb == 4096  # tony-site beats conf_file
    assert spec.queue == "q3"  # --conf beats everything
    assert spec.am.memory_mb == 2048  # built-in default


def test_tony_xml_in_cwd_is_used_without_conf_file(tmp_path):
    write(tmp_path / "tony.xml", {"tony.worker.instances": "3"})
    assert spec_from(tmp_path).type("worker").instances == 3


def test_conf_appends_to_list_keys(tmp_path):
    conf_file = write(tmp_path / "job.xml", {"tony.worker.instances": "1", "tony.execution.envs": "A=1"})
    spec = spec_from(tmp_path, ["tony.execution.envs=B=2"], conf_file=str(conf_file))
    assert spec.execution_env == {"A": "1", "B": "2"}


def test_variable_expansion(tmp_path):
    spec = spec_from(tmp_path, ["tony.worker.instances=1", "tony.x.mem=3g", "tony.worker.memory=${tony.x.mem}"])
    assert spec.type("worker").resources.memory_mb == 3072


def test_types_ordering_and_chief_rule(tmp_path):
    spec = spec_from(tmp_path, ["tony.ps.instances=1", "tony.worker.instances=2", "tony.chief.instances=1"])
    assert spec.type_names() == ["chief", "worker", "ps"]
    assert spec.chief() == TaskId("chief", 0)
    assert [str(t) for t in spec.tracked_tasks()] == ["chief:0", "worker:0", "worker:1"]
    spec = spec_from(tmp_path, ["tony.ps.instances=1", "tony.worker.instances=2"])
    assert spec.chief() == TaskId("worker", 0)


@pytest.mark.parametrize("override,key", [
    ("tony.application.framework=caffe", "tony.application.framework"),
    ("tony.worker.instances=-1", "tony.worker.instances"),
    ("tony.worker.instances=two", "tony.worker.instances"),
    ("tony.worker.vcores=0", "tony.worker.vcores"),
    ("tony.worker.gpus=-2", "tony.worker.gpus"),
    ("tony.worker.memory=lots", "tony.worker.memory"),
    ("tony.application.distributed-mode=RANDOM", "tony.application.distributed-mode"),
    ("tony.Worker.instances=2", "tony.Worker.instances"),
    ("tony.am.retry-count=x", "tony.am.retry-count"),
    ("tony.application.fail-on-worker-failure-enabled=maybe", "tony.application.fail-on-worker-failure-enabled"),
])
def test_bad_values_name_the_key(tmp_path, override, key):
    with pytest.raises(ConfigError) as err:
        spec_from(tmp_path, ["tony.worker.instances=1", override])
    assert err.value.key == key
    assert key in str(err.value)


def test_no_instances_is_a_single_node_job(tmp_path):
    spec = spec_from(tmp_path, ["tony.am.memory=3g"])
    assert spec.single_node and [str(t) for t in spec.tasks()] == ["driver:0"]
    assert spec.type("driver").resources.memory_mb == 3072  # it runs in the AM's container
    assert spec_from(tmp_path, ["tony.worker.instances=0"]).single_node


def test_missing_command_is_an_error(tmp_path):
    conf = load_conf(None, ["tony.worker.instances=1"], env={}, cwd=tmp_path)
    with pytest.raises(UsageError, match="--executes"):
        build_job_spec(conf)


def test_standalone_needs_exactly_one_task(tmp_path):
    with pytest.raises(ConfigError, match="standalone runs exactly one task"):
        spec_from(tmp_path, ["tony.application.framework=standalone", "tony.worker.instances=2"])


def test_entity_bomb_is_refused(tmp_path):
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(textwrap.dedent("""\
        <?xml version="1.0"?>
        <!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;">]>
        <configuration><property><name>a</name><value>&lol1;</value></property></configuration>"""))
    with pytest.raises(UsageError, match="refused hostile XML"):
        load_conf(str(bomb), [], env={}, cwd=tmp_path)


def test_malformed_xml(tmp_path):
    bad = tmp_path / "bad.xml"
    bad.write_text("<configuration><property><name>a</name>")
    with pytest.raises(UsageError, match="not well-formed"):
        load_conf(str(bad), [], env={}, cwd=tmp_path)


def test_bad_conf_override(tmp_path):
    with pytest.raises(UsageError, match="key=value"):
        load_conf(None, ["justakey"], env={}, cwd=tmp_path)


CLUSTER = {
    "resource_types": ["memory-mb", "vcores", "yarn.io/gpu"],
    "nodes": [
        {"id": "n1:1", "capability": {"memory-mb": 8192, "vcores": 8, "yarn.io/gpu": 2}},
        {"id": "n2:1", "capability": {"memory-mb": 8192, "vcores": 8, "yarn.io/gpu": 0}},
    ],
}


def test_fits(tmp_path):
    check_fits(spec_from(tmp_path, ["tony.worker.instances=4", "tony.worker.gpus=2"]), CLUSTER)


@pytest.mark.parametrize("override,key,words", [
    ("tony.worker.memory=9g", "tony.worker.memory", "largest node has 8192"),
    ("tony.worker.gpus=3", "tony.worker.gpus", "3 GPUs"),
    ("tony.worker.vcores=9", "tony.worker.vcores", "9 vcores"),
    ("tony.am.memory=10g", "tony.am.memory", "10240 MB"),
])
def test_too_big_for_any_node(tmp_path, override, key, words):
    with pytest.raises(ConfigError) as err:
        check_fits(spec_from(tmp_path, ["tony.worker.instances=1", override]), CLUSTER)
    assert err.value.key == key and words in str(err.value)


def test_gpus_on_cluster_without_gpu_type(tmp_path):
    cluster = {"resource_types": ["memory-mb", "vcores"], "nodes": CLUSTER["nodes"]}
    with pytest.raises(ConfigError, match="does not schedule yarn.io/gpu"):
        check_fits(spec_from(tmp_path, ["tony.worker.instances=1", "tony.worker.gpus=1"]), cluster)


@pytest.mark.parametrize("override,key", [
    ("tony.worker.memory=" + "9" * 400, "tony.worker.memory"),
    ("tony.worker.instances=1000000000", "tony.worker.instances"),
])
def test_absurd_values_are_refused_not_crashing(tmp_path, override, key):
    with pytest.raises(ConfigError) as err:
        spec_from(tmp_path, ["tony.worker.instances=1", override])
    assert err.value.key == key


def test_exploding_variable_expansion_is_refused(tmp_path):
    overrides = ["tony.worker.instances=1", "tony.a0=xxxxxxxxxxxxxxxx"]
    overrides += [f"tony.a{i}=${{tony.a{i - 1}}}${{tony.a{i - 1}}}" for i in range(1, 20)]
    overrides += ["tony.application.name=${tony.a19}"]
    with pytest.raises(UsageError, match="grows past"):
        spec_from(tmp_path, overrides)


def test_env_references_expand_from_the_client_environment(tmp_path):
    conf = load_conf(None, ["tony.containers.command=x", "tony.worker.instances=1",
                            "tony.application.name=run-${env.TONY_TEST_RUN}", "tony.yarn.queue=${env.TONY_NO_SUCH}"],
                     env={}, cwd=tmp_path)
    import os
    os.environ["TONY_TEST_RUN"] = "42"
    try:
        spec = build_job_spec(conf)
    finally:
        del os.environ["TONY_TEST_RUN"]
    assert spec.name == "run-42"
    assert spec.queue == "${env.TONY_NO_SUCH}"  # an unset variable stays as written, as in Hadoop


# ---- tony.<type>.nproc-per-node: torchrun ------------------------------------------------------------
TORCHRUN = ("tony.application.framework=pytorch", "tony.worker.instances=2")


def test_nproc_per_node_defaults_to_one_and_travels_in_the_spec(tmp_path):
    from tony_py.config.spec import JobSpec

    assert spec_from(tmp_path, TORCHRUN).type("worker").nproc_per_node == 1
    spec = spec_from(tmp_path, [*TORCHRUN, "tony.chief.instances=1", "tony.chief.nproc-per-node=4",
                                "tony.worker.nproc-per-node=4", "tony.worker.gpus=8", "tony.chief.gpus=4"])
    assert [t.nproc_per_node for t in spec.types] == [4, 4]
    assert JobSpec.from_dict(spec.to_dict()) == spec
    data = spec.to_dict()
    data["types"][0].pop("nproc_per_node")
    with pytest.raises(ValueError, match="nproc_per_node"):  # the checked round trip: all keys or none
        JobSpec.from_dict(data)


@pytest.mark.parametrize("overrides,key,words", [
    (("tony.worker.nproc-per-node=0",), "tony.worker.nproc-per-node", "must be >= 1"),
    (("tony.worker.nproc-per-node=two",), "tony.worker.nproc-per-node", "whole number"),
    (("tony.worker.nproc-per-node=100000",), "tony.worker.nproc-per-node", "must be <= 1024"),
    (("tony.application.framework=tensorflow", "tony.worker.nproc-per-node=2"), "tony.worker.nproc-per-node",
     "needs tony.application.framework=pytorch (not tensorflow); allowed here: 1"),
    (("tony.evaluator.instances=1", "tony.evaluator.nproc-per-node=2"), "tony.evaluator.nproc-per-node",
     "only trainer types (chief, master, worker) run under torchrun"),
    (("tony.worker.nproc-per-node=2", "tony.worker.gpus=1"), "tony.worker.gpus", "do not split evenly"),
    (("tony.worker.nproc-per-node=2", "tony.worker.gpus=3"), "tony.worker.gpus", "use 0 or a multiple of it"),
    (("tony.worker.nproc-per-node=2", "tony.chief.instances=1"), "tony.chief.nproc-per-node",
     "is 1, but tony.worker.nproc-per-node is 2"),
    (("tony.worker.nproc-per-node=2", "tony.application.distributed-mode=FCFS"), "tony.application.distributed-mode",
     "needs GANG"),
    (("tony.worker.nproc-per-node=2", "tony.worker.command=bash run.sh"), "tony.worker.nproc-per-node",
     "starts with the Python interpreter"),
    (("tony.worker.nproc-per-node=2", "tony.worker.command=python -u train.py --password hunter2"),
     "tony.worker.nproc-per-node", "no interpreter option ('-u')"),
])
def test_bad_nproc_per_node_is_exit_2_naming_the_key(tmp_path, overrides, key, words):
    with pytest.raises(ConfigError) as err:
        spec_from(tmp_path, [*TORCHRUN, *overrides])
    assert err.value.key == key and err.value.exit_code == 2
    assert str(err.value).startswith(key) and words in str(err.value), str(err.value)
    assert "hunter2" not in str(err.value)  # the command is never echoed: task_params may hold credentials


def test_nproc_per_node_accepts_the_jobs_interpreter_and_modules(tmp_path):
    conf = load_conf(None, ["tony.containers.command='/opt/env/bin/py' train.py", *TORCHRUN,
                            "tony.worker.nproc-per-node=2"], env={}, cwd=tmp_path)
    with pytest.raises(ConfigError):
        build_job_spec(conf)  # not named python*: only as the job's own interpreter
    assert build_job_spec(conf, python="'/opt/env/bin/py'").type("worker").nproc_per_node == 2
    for command in ("venv/bin/python3.11 -m my.trainer --lr 1", "'venv/bin/python' train.py --x 'a b'"):
        spec = spec_from(tmp_path, [*TORCHRUN, "tony.worker.nproc-per-node=2", f"tony.worker.command={command}"])
        assert spec.type("worker").nproc_per_node == 2


def test_nproc_per_node_for_a_type_without_instances_is_silent(tmp_path):
    spec = spec_from(tmp_path, [*TORCHRUN, "tony.evaluator.nproc-per-node=2"])  # TonY's rule for unused types
    assert spec.type_names() == ["worker"]


def test_nproc_per_node_is_a_known_key_and_its_typos_are_named(tmp_path):
    from tony_py.config import keys

    conf = load_conf(None, ["tony.containers.command=python x.py", *TORCHRUN, "tony.worker.nproc-per-node=2",
                            "tony.worker.nproc-per-nod=2"], env={}, cwd=tmp_path)
    assert keys.review(conf, ["worker"]) == ["tony.worker.nproc-per-nod (set in --conf): unknown key, ignored; "
                                             "did you mean tony.worker.nproc-per-node?"]
