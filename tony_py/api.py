"""TonY-py for programs that launch jobs (Airflow operators, notebooks, schedulers).

    from tony_py import api

    with api.submit("train.py", src_dir="src", python_binary_path="/opt/venv/bin/python",
                    conf={"tony.worker.instances": "2"}, task_params="--epochs 3") as job:
        print(job.app_id, job.tracking_url)
        print(job.status().tasks)             # the task table `tony submit` shows
        final = job.wait(timeout=3600)        # "SUCCEEDED", "FAILED" or "KILLED"

    job = api.attach("application_1700000000000_0042")   # a job submitted elsewhere
    job.kill()

The same code path as `tony submit` (the CLI is a thin layer over it): the same checks, with
the same one-line messages, raised as exceptions (UsageError and ConfigError for bad input,
with nothing created on the cluster; TonyError for the rest). Nothing here installs signal
handlers. A Job holds a client JVM: close it (or use `with`) when done.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Iterable, Mapping

from tony_py.bridge.gateway import ClientGateway
from tony_py.client.flags import SubmitArgs
from tony_py.client.job import Job, JobStatus, TaskStatus
from tony_py.client.local import LocalJob, start_local
from tony_py.client.prepare import local_paths, prepare
from tony_py.client.submission import Submission, open_gateway
from tony_py.client.staging import STAGING_ROOT
from tony_py.errors import ConfigError, SetupError, TonyError, UsageError

__all__ = ["submit", "attach", "Job", "LocalJob", "JobStatus", "TaskStatus", "TonyError", "UsageError", "ConfigError",
           "SetupError"]


def _pairs(value: Mapping[str, str] | Iterable[str] | None, what: str) -> list[str]:
    """{"K": "V"} or ["K=V", …], as the CLI's repeatable flags take them."""
    if value is None:
        return []
    if isinstance(value, str):
        raise UsageError(f"{what}: pass a mapping or a list of KEY=VALUE strings, not one string")
    if isinstance(value, Mapping):
        return [f"{k}={v}" for k, v in value.items()]
    return [str(v) for v in value]


def submit(executes: str | None = None, *, src_dir: str | None = None, task_params: str | None = None,
           python_venv: str | None = None, python_binary_path: str | None = None,
           shell_env: Mapping[str, str] | Iterable[str] | None = None,
           container_env: Mapping[str, str] | Iterable[str] | None = None, conf_file: str | None = None,
           conf: Mapping[str, str] | Iterable[str] | None = None, hdfs_classpath: str | None = None,
           sidecar_tensorboard_log_dir: str | None = None, principal: str | None = None,
           keytab: str | None = None, local: bool = False) -> Job | LocalJob:
    """Submit a job with TonY's flags (as keyword arguments) and return once YARN has it.
    On a Kerberos cluster, principal and keytab log in from the keytab (else the ticket cache or
    HADOOP_TOKEN_FILE_LOCATION is used).
    local=True runs it on this machine instead (no YARN, HDFS or JVM: tony_py/client/local.py);
    the handle has the same status(), wait(), kill() and close()."""
    args = SubmitArgs(executes=executes, task_params=task_params, python_venv=python_venv,
                      python_binary_path=python_binary_path, src_dir=src_dir,
                      shell_env=_pairs(shell_env, "shell_env"), container_env=_pairs(container_env, "container_env"),
                      conf_file=conf_file, conf=_pairs(conf, "conf"), hdfs_classpath=hdfs_classpath,
                      sidecar_tensorboard_log_dir=sidecar_tensorboard_log_dir, principal=principal, keytab=keytab,
                      detach=not local, quiet=True,
                      local=local)
    if local:
        prepared = prepare(local_paths(args))
        job = start_local(prepared)
        job.warnings = list(prepared.warnings)
        return job
    with tempfile.TemporaryDirectory(prefix="tony-conf-") as tmp:
        gw, prepared = open_gateway(local_paths(args), Path(tmp))
    try:
        job = Submission(gw, prepared).submit()
    except BaseException:
        gw.close()
        raise
    job.take_gateway()  # the job's handle keeps the client's JVM; Job.close() stops it
    job.warnings = list(prepared.warnings)
    return job


def attach(app_id: str) -> Job:
    """A handle on an application submitted elsewhere (another process, the CLI with --detach).
    Full task detail needs the application's secret, which its owner can read from the staging
    dir while the job runs; without it the AM shows task states only."""
    if not app_id.startswith("application_"):
        raise UsageError(f"{app_id!r} is not a YARN application id (application_<cluster>_<n>)")
    gw = ClientGateway()
    try:
        home = gw.call("home directory", gw.fs.homeDirectory)
        staging = f"{home}/{STAGING_ROOT}/{app_id}"
        secret_path = f"{staging}/tony-secret"
        secret = gw.call("read the secret", gw.fs.readText, secret_path).strip() \
            if gw.call("look for the secret", gw.fs.exists, secret_path) else None
        job = Job(gw, app_id, secret, staging)
        job.refresh()  # an unknown application fails here, with YARN's words
    except BaseException:
        gw.close()
        raise
    job.take_gateway()
    return job
