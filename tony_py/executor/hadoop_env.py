"""TonY's task classpath: every task command gets Hadoop's client jars on CLASSPATH, as TonY
starts every command with `CLASSPATH=$(${HADOOP_HDFS_HOME}/bin/hadoop classpath --glob)`, unless
the job sets SKIP_HADOOP_PATH. It is what libhdfs needs (pyarrow's HadoopFileSystem,
tensorflow-io's hdfs://): the JVM it starts inside the task finds Hadoop only there (TonY's
issue #404: users set it by hand otherwise).

Where the jars come from, in order:
- the node's Hadoop install: `$HADOOP_HDFS_HOME/bin/hadoop classpath --glob` (or HADOOP_HOME's),
  exactly TonY's way; a node of a real cluster has one;
- else the cluster's `yarn.application.classpath` (the AM passes it as TONY_YARN_CLASSPATH, its
  variables expanded by the container's launch script), each `dir/*` expanded to its jars as
  `--glob` does: a JVM's own wildcard is not understood by libhdfs.
Entries already on CLASSPATH (--hdfs_classpath's jars) stay, before Hadoop's: the user's jars
win, as they did before this prefix existed.
"""

from __future__ import annotations

import functools
import glob
import logging
import os
import subprocess
from pathlib import Path

log = logging.getLogger("tony.executor")

SKIP = "SKIP_HADOOP_PATH"
YARN_CLASSPATH = "TONY_YARN_CLASSPATH"  # from the AM (tony_py/am/launch.py), never the user's process's


def task_classpath(env: dict[str, str]) -> str | None:
    """The CLASSPATH a task command runs with, or None to leave it as it is (SKIP_HADOOP_PATH,
    or no Hadoop to be found)."""
    if SKIP in env:
        log.info("%s is set: the task's CLASSPATH is left as it is", SKIP)
        return None
    hadoop_jars = _from_hadoop_command(env) or _from_yarn_classpath(env.get(YARN_CLASSPATH, ""))
    if not hadoop_jars:
        log.info("no Hadoop install and no yarn.application.classpath: the task's CLASSPATH is left as it is")
        return None
    own = [p for p in env.get("CLASSPATH", "").split(os.pathsep) if p and p not in hadoop_jars]
    return os.pathsep.join(own + hadoop_jars)


def _from_hadoop_command(env: dict[str, str]) -> list[str]:
    for home_var in ("HADOOP_HDFS_HOME", "HADOOP_HOME"):
        hadoop = Path(env.get(home_var) or "/nonexistent") / "bin" / "hadoop"
        if os.access(hadoop, os.X_OK):
            return list(_hadoop_classpath(str(hadoop), env.get("HADOOP_CONF_DIR", "")))
    return []


@functools.lru_cache(maxsize=4)  # a JVM start (about a second): once per executor, not per attempt
def _hadoop_classpath(hadoop: str, conf_dir: str) -> tuple[str, ...]:
    env = {**os.environ, **({"HADOOP_CONF_DIR": conf_dir} if conf_dir else {})}
    try:
        out = subprocess.run([hadoop, "classpath", "--glob"], env=env, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("`%s classpath --glob` failed (%s); using yarn.application.classpath", hadoop, exc)
        return ()
    if out.returncode != 0 or not out.stdout.strip():
        log.warning("`%s classpath --glob` exited %d; using yarn.application.classpath", hadoop, out.returncode)
        return ()
    log.info("the task's CLASSPATH from `%s classpath --glob`", hadoop)
    return tuple(p for p in out.stdout.strip().split(os.pathsep) if p)


def _from_yarn_classpath(value: str) -> list[str]:
    """Each entry as `hadoop classpath --glob` gives it: `dir/*` as the jars in dir, others kept."""
    out: list[str] = []
    for entry in (e.strip() for e in value.split(os.pathsep)):
        if not entry:
            continue
        if entry.endswith("/*"):
            out.extend(sorted(p for p in glob.glob(entry[:-1] + "*") if p.lower().endswith(".jar")))
        elif os.path.exists(entry):
            out.append(entry)
    return list(dict.fromkeys(out))
