"""What a task container is started with: localized files, environment, command.

The environment is TonY's contract for every task (JOB_NAME, TASK_INDEX, TASK_NUM, JOB_ID,
appid, DISTRIBUTED_MODE, IS_CHIEF on the chief, AM_HOST, AM_PORT) plus what the executor needs
to find the AM (its secret comes in the container's credentials: see tony_py/appsecret.py).
Framework variables (TF_CONFIG, MASTER_ADDR, …) are not here: they depend on the cluster spec,
which exists only once the tasks registered, and reach the executor with it. The task's
command and shell env are not here either: YARN writes env values into a bash script
unescaped (quotes break it, `$` expands), so the executor fetches the JobSpec from the AM.

Localized: the runtime (cached per node across jobs), the venv and the user's resources. The
job's own files (spec, tony-final.xml, the src_dir archive when small) come from the AM over
the signed channel instead (GET /v1/job, /v1/src), and the secret in the container's
credentials: a container that needs only cached files starts without a localizer, which is
most of what YARN's own containers do not pay. Not on a Kerberos cluster: the channel is signed,
not encrypted, and there the job's files keep the protection HDFS and YARN give them
(JobMeta.files_from_am).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from tony_py import appsecret
from tony_py.am.core.gpus import visible_devices_env
from tony_py.am.core.tasks import Task
from tony_py.config.spec import FINAL_CONF_FILE, SPEC_FILE, TENSORBOARD_TYPE, JobSpec

# YARN expands these in the container's launch script.
PWD = "{{PWD}}"
LOG_DIR = "<LOG_DIR>"
RUNTIME_LINK = "tony_runtime"
JAR_LINK = "tony-py.jar"
EXECUTOR_LOG = "executor.log"
# The AM serves the zipped src_dir when that costs it little: at most 8 MiB, and at most 256 MiB
# sent to all the job's tasks together. A larger one is localized by YARN (read from HDFS once
# per node, cached there), whose per-node localizer then is the smaller cost.
AM_SRC_MAX_BYTES = 8 << 20
AM_SRC_TOTAL_MAX_BYTES = 256 << 20


JOB_META_FILE = "tony-job.json"  # JobMeta, what the AM reads first
# The AM's own job files (JOB_META_FILE, the spec, tony-final.xml) travel in its credentials while
# they compress to at most this much: the ResourceManager keeps every application's launch
# context, credentials included, in memory and in its state store. Larger ones are localized.
AM_CREDENTIAL_FILES_MAX_BYTES = 64 << 10


def am_credential_files(files: dict[str, str]) -> dict[str, bytes] | None:
    """The AM's job files as secret keys of its credentials (appsecret.job_file reads them back),
    or None if they are too large for that."""
    import zlib  # the client's business

    keys = {appsecret.FILE_ALIAS_PREFIX + name: zlib.compress(text.encode(), 6) for name, text in files.items()}
    return keys if sum(len(v) for v in keys.values()) <= AM_CREDENTIAL_FILES_MAX_BYTES else None


def am_serves_src(size: int, tasks: int) -> bool:
    return 0 <= size <= AM_SRC_MAX_BYTES and size * max(tasks, 1) <= AM_SRC_TOTAL_MAX_BYTES


def job_file_delivery(kerberos: bool, single_node: bool, src_link: str | None, src_size: int,
                      tasks: int) -> tuple[bool, bool, list[str]]:
    """(files_from_am, src_from_am, the job's own files task containers still localize):
    whether the AM serves the spec and tony-final.xml, and the src_dir archive (src_link, if the
    job has one), or YARN localizes them. The channel is signed, not encrypted: on a Kerberos
    cluster they keep what HDFS and YARN protect them with. A single-node job's task runs in the
    AM's container, which localizes its src_dir anyway."""
    files = not kerberos
    src = files and src_link is not None and not single_node and am_serves_src(src_size, tasks)
    localized = ([src_link] if src_link and not src else []) + ([] if files else [FINAL_CONF_FILE, SPEC_FILE])
    return files, src, localized


@dataclass
class JobMeta:
    """What the client staged for the job (tony-job.json, in the AM's credentials or localized)."""

    app_id: str
    staging_dir: str
    user: str
    resources: dict[str, dict]  # link name -> {path, size, mtime, type, visibility}
    task_resources: list[str]  # link names every task container gets
    task_python: str  # the interpreter that runs the executor (and, usually, the user code)
    src_zip: str | None = None  # link name of the zipped src_dir, unpacked by the executor
    files_from_am: bool = False  # the AM serves the spec and tony-final.xml (GET /v1/job): not localized
    src_from_am: bool = False  # the AM serves src_zip (GET /v1/src) instead of YARN localizing it
    src_path: str | None = None  # where the AM downloads src_zip from, when it serves it
    extra: dict = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict) -> "JobMeta":
        known = {k: data[k] for k in cls.__dataclass_fields__ if k in data and k != "extra"}
        extra = {k: v for k, v in data.items() if k not in cls.__dataclass_fields__}
        return cls(**known, extra=extra)

    def to_json(self) -> dict:
        data = {k: v for k, v in self.__dict__.items() if k != "extra"}
        data.update(self.extra)
        return data


def needs_hadoop_in_task(spec: JobSpec) -> bool:
    """The sidecar TensorBoard of a log dir on a Hadoop file system mirrors it with a JVM: its
    container gets the jar and the cluster's Hadoop classpath."""
    log_dir = spec.tensorboard_log_dir or ""
    return "://" in log_dir and not log_dir.startswith("file://")


def docker_env(spec: JobSpec, image: str | None) -> dict[str, str]:
    """What YARN's DockerLinuxContainerRuntime reads from a container's launch environment
    (tony.docker.*; the values were checked for the launch script by the client)."""
    if not spec.docker_enabled or not image:
        return {}
    env = {"YARN_CONTAINER_RUNTIME_TYPE": "docker", "YARN_CONTAINER_RUNTIME_DOCKER_IMAGE": image}
    if spec.docker_mounts:
        env["YARN_CONTAINER_RUNTIME_DOCKER_MOUNTS"] = spec.docker_mounts
    return env


def simple_user() -> str:
    """Who YARN and HDFS take a client for on a cluster without Kerberos (Hadoop's
    UserGroupInformation): HADOOP_USER_NAME, else the OS user. The job's user is that, and its
    tasks act as it (TaskLauncher.env)."""
    import getpass
    import os

    return os.environ.get("HADOOP_USER_NAME") or getpass.getuser()


class TaskLauncher:
    def __init__(self, spec: JobSpec, meta: JobMeta, am_host: str, am_port: int):
        self.spec = spec
        self.meta = meta
        self.am_host = am_host
        self.am_port = am_port

    def env(self, task: Task) -> dict[str, str]:
        spec = self.spec
        env = dict(spec.container_env)
        if not self.meta.extra.get("kerberos"):  # who task code is to HDFS without a JVM (tony_py/hdfs.py)
            env.setdefault("HADOOP_USER_NAME", self.meta.user)
        env.update(
            JOB_NAME=task.id.type,
            TASK_INDEX=str(task.id.index),
            TASK_NUM=str(len(spec.tracked_tasks())),
            JOB_ID=self.meta.app_id,
            appid=self.meta.app_id,
            DISTRIBUTED_MODE=spec.distributed_mode,
            AM_HOST=self.am_host,
            AM_PORT=str(self.am_port),
            TONY_AM_URL=f"http://{self.am_host}:{self.am_port}",
            TONY_TASK=task.name,
            TONY_AM_LOST_TIMEOUT_S=str(spec.am_lost_timeout_s),  # how long to retry the AM before the spec is in
            TONY_RUNTIME_DIR=f"{PWD}/{RUNTIME_LINK}",
            PYTHONPATH=f"{PWD}/{RUNTIME_LINK}:{PWD}/{RUNTIME_LINK}/deps",
            PYTHONUNBUFFERED="1",
        )
        if self.meta.src_zip:
            env["TONY_SRC_ZIP"] = self.meta.src_zip
        # the cluster's yarn.application.classpath, for TonY's task CLASSPATH (executor/hadoop_env.py);
        # the launch script expands its variables, the NodeManager its <CPS>
        env["TONY_YARN_CLASSPATH"] = "<CPS>".join(self.meta.extra.get("hadoop_classpath") or [])
        hdfs_classpath = self.meta.extra.get("hdfs_classpath") or []
        if hdfs_classpath:
            # --hdfs_classpath: the files were localized into the working dir.
            env["CLASSPATH"] = ":".join([f"{PWD}/{name}" for name in hdfs_classpath] + ["$CLASSPATH"])
        if task.id == spec.chief():
            env["IS_CHIEF"] = "true"
        if task.id == spec.tb_port_task():  # the sidecar TensorBoard if there is one, else the chief
            env["TONY_RESERVE_TB_PORT"] = "1"
        if task.id.type == TENSORBOARD_TYPE and needs_hadoop_in_task(spec):
            classpath = [f"{PWD}/{JAR_LINK}", *(self.meta.extra.get("hadoop_classpath") or [])]
            env["TONY_HADOOP_CLASSPATH"] = "<CPS>".join(classpath)
        env.update(docker_env(spec, spec.type(task.id.type).docker_image))
        env.update(visible_devices_env(task.gpus, docker=bool(docker_env(spec, spec.type(task.id.type).docker_image))))
        return env

    def command(self) -> str:
        python = shlex.quote(self.meta.task_python)
        # -S: the executor needs the standard library and the runtime (PYTHONPATH) only, so it
        # skips site-packages and its .pth hooks (a node starts one executor per container).
        return f"{python} -S -m tony_py.executor 1>>{LOG_DIR}/{EXECUTOR_LOG} 2>&1"

    def build(self, task: Task) -> dict:
        names = self.meta.task_resources + (self.meta.extra.get("type_resources") or {}).get(task.id.type, [])
        resources = {name: self.meta.resources[name] for name in names}
        return {"resources": resources, "env": self.env(task), "commands": [self.command()]}
