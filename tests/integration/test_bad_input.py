"""Bad input: a one-line error that names the key or flag, exit code 2, and nothing left on
the cluster (no application, no staging dir)."""

import pytest

from support import JOBS, PYTHON

BOMB = """<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">]>
<configuration><property><name>tony.worker.instances</name><value>&lol2;</value></property></configuration>
"""
MALFORMED = "<configuration><property><name>tony.worker.instances</name><value>2</value></configuration>"


def base(tmp_path):
    return ["--src_dir", str(JOBS), "--executes", "probe.py", "--python_binary_path", PYTHON,
            "--task_params", f"--out {tmp_path}", "--conf", "tony.worker.instances=1"]


CASES = {
    "unknown framework": (["--conf", "tony.application.framework=caffe"], "tony.application.framework"),
    "negative count": (["--conf", "tony.worker.instances=-1"], "tony.worker.instances"),
    "non-numeric count": (["--conf", "tony.ps.instances=two"], "tony.ps.instances"),
    "bad memory": (["--conf", "tony.worker.memory=2q"], "tony.worker.memory"),
    "malformed xml": (["--conf_file", "{malformed}"], "not well-formed"),
    "entity bomb": (["--conf_file", "{bomb}"], "refused hostile XML"),
    "missing src_dir": (["--src_dir", "/nonexistent/src"], "--src_dir"),
    "missing venv": (["--python_venv", "/nonexistent/venv.zip"], "--python_venv"),
    "unknown flag": (["--exeuctes", "x.py"], "--exeuctes"),
    "container bigger than any node": (["--conf", "tony.worker.memory=64g"], "tony.worker.memory"),
    "more gpus than any node": (["--conf", "tony.worker.gpus=3"], "tony.worker.gpus"),
    "am bigger than any node": (["--conf", "tony.am.vcores=64"], "tony.am.vcores"),
    "missing resource": (["--conf", "tony.worker.resources=/nonexistent/vocab.txt"], "tony.worker.resources"),
    "clashing resource names": (["--conf", "tony.containers.resources={malformed}::data,{bomb}::data"],
                                "names two different files"),
    "reserved resource name": (["--conf", "tony.containers.resources={malformed}::venv"], "is reserved"),
    "unknown queue": (["--conf", "tony.yarn.queue=no-such-queue"], "tony.yarn.queue"),
    "missing remote src_dir": (["--src_dir", "hdfs:///no/such/src.zip"], "--src_dir"),
    "empty executes": (["--executes", " "], "--executes"),
    "src_dir entry named like a resource": (["--src_dir", "{src_with_venv}"], "'venv'"),
    "control character in task_params": (["--task_params", "--tag a\x01b"], "tony.containers.command"),
    "command substitution in container_env": (["--container_env", "X=$(id)"], "--container_env"),
    "node label no node carries": (["--conf", "tony.worker.node-label=tpu"], "tony.worker.node-label"),
    "launch-unsafe AM python": (["--conf", 'tony.am.python=py"thon'], "tony.am.python"),
    "torchrun outside pytorch": (["--conf", "tony.worker.nproc-per-node=2"], "tony.worker.nproc-per-node"),
    "ray job with a ps": (["--conf", "tony.application.framework=ray", "--conf", "tony.ps.instances=1"],
                          "tony.ps.instances"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_is_refused_before_anything_is_created(case, tony, cluster, tmp_path):
    extra, needle = CASES[case]
    (tmp_path / "malformed.xml").write_text(MALFORMED)
    (tmp_path / "bomb.xml").write_text(BOMB)
    src_with_venv = tmp_path / "src"
    (src_with_venv / "venv" / "bin").mkdir(parents=True)
    (src_with_venv / "probe.py").write_text("")
    extra = [a.format(malformed=tmp_path / "malformed.xml", bomb=tmp_path / "bomb.xml", src_with_venv=src_with_venv)
             if "{" in a else a for a in extra]
    apps_before = len(cluster.apps())
    run = tony(*base(tmp_path), *extra, timeout=120)
    assert run.rc == 2, run.output
    errors = [line for line in run.stderr.strip().splitlines() if line.strip()]
    assert len(errors) == 1, run.stderr  # one line, no traceback
    assert needle in errors[0], errors[0]
    assert run.stdout == ""
    assert len(cluster.apps()) == apps_before  # no YARN application was created
    assert cluster.staging_dirs() == []


def test_missing_executes(tony, cluster, tmp_path):
    run = tony("--src_dir", str(JOBS), "--conf", "tony.worker.instances=1")
    assert run.rc == 2 and "--executes" in run.stderr and len(run.stderr.strip().splitlines()) == 1


def test_help_lists_tonys_flags(tony):
    run = tony("--help")
    assert run.rc == 0
    for flag in ("--executes", "--task_params", "--python_venv", "--python_binary_path", "--src_dir",
                 "--shell_env", "--container_env", "--conf_file", "--conf", "--hdfs_classpath"):
        assert flag in run.stdout
