"""TonY's task CLASSPATH (tony_py/executor/hadoop_env.py): the node's `hadoop classpath --glob`
where a Hadoop install is, else the cluster's yarn.application.classpath with each `dir/*`
expanded to its jars; the task's own entries first; nothing with SKIP_HADOOP_PATH."""

from __future__ import annotations

import os

import pytest

from tony_py.executor import hadoop_env

pytestmark = pytest.mark.unit


@pytest.fixture
def lib(tmp_path):
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("hadoop-common-3.4.3.jar", "hadoop-hdfs-client-3.4.3.jar", "NOTES.txt"):
        (lib / name).write_text("x")
    (tmp_path / "conf").mkdir()
    return tmp_path


def test_the_yarn_classpath_is_expanded_to_jars_with_the_tasks_own_first(lib):
    env = {hadoop_env.YARN_CLASSPATH: f"{lib}/conf:{lib}/lib/*:{lib}/missing", "CLASSPATH": "/job/extra.jar"}
    assert hadoop_env.task_classpath(env).split(os.pathsep) == [
        "/job/extra.jar", f"{lib}/conf", f"{lib}/lib/hadoop-common-3.4.3.jar", f"{lib}/lib/hadoop-hdfs-client-3.4.3.jar"]


def test_the_nodes_hadoop_command_wins_and_skip_hadoop_path_leaves_it_alone(lib, tmp_path):
    home = tmp_path / "hadoop"
    (home / "bin").mkdir(parents=True)
    (home / "bin" / "hadoop").write_text(f'#!/bin/sh\n[ "$1 $2" = "classpath --glob" ] && echo "/etc/hadoop:{lib}/x.jar"\n')
    (home / "bin" / "hadoop").chmod(0o755)
    env = {"HADOOP_HDFS_HOME": str(home), hadoop_env.YARN_CLASSPATH: f"{lib}/lib/*"}
    assert hadoop_env.task_classpath(env) == f"/etc/hadoop:{lib}/x.jar"
    assert hadoop_env.task_classpath({**env, "SKIP_HADOOP_PATH": "true"}) is None
    assert hadoop_env.task_classpath({}) is None  # nothing to be found: CLASSPATH is not touched
