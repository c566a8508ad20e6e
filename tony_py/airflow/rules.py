"""What the Airflow operator decides, without Airflow: its arguments' checks, whether a failed job
is the infrastructure's (Airflow may retry it) or the job's own (it must not), the task-table
lines it writes into the task log, and the state its trigger carries through the metadata DB.

Nothing here imports airflow, so the rules are tested in the main venv's unit tier; operator.py
and trigger.py are the thin Airflow side.
"""

from __future__ import annotations

import inspect
import math
import os
from dataclasses import asdict, dataclass, field
from typing import Mapping

from tony_py import api
from tony_py.config.yarnsite import rm_web_urls
from tony_py.job.yarn_exits import INFRASTRUCTURE_EXITS
from tony_py.client.monitor import changed_task_lines
from tony_py.errors import EXIT_JOB_FAILED, EXIT_OK, EXIT_USAGE, TonyError, UsageError
from tony_py.job.records import FailureKind

# api.submit's keyword arguments are the operator's: one list, so the two cannot drift apart.
SUBMIT_ARGS = tuple(inspect.signature(api.submit).parameters)
_PAIR_ARGS = ("shell_env", "container_env", "conf")
_BOOL_ARGS = ("local",)
_TEXT_ARGS = tuple(a for a in SUBMIT_ARGS if a not in _PAIR_ARGS + _BOOL_ARGS)

# A root cause of these kinds is the cluster's doing (YARN took the container back, a node or
# its disks went, an executor vanished, a container could not start), as is a task that ended
# while another was being preempted: Airflow may run the job again. A task's own exit code
# (a memory-limit kill included: the AM reads -103/-104 as one), signal or timeout is the job's:
# running it again fails again.
INFRASTRUCTURE_KINDS = frozenset({FailureKind.INFRASTRUCTURE.value, FailureKind.PREEMPTED.value,
                                  FailureKind.LOST.value, FailureKind.LAUNCH.value})


def check_arguments(task_id: str, submit_args: Mapping[str, object], deferrable: object,
                    poll_interval: object) -> None:
    """Refuse a bad argument when the DAG is parsed, naming it and what is allowed (UsageError,
    exit code 2: nothing is submitted)."""

    def bad(name: str, allowed: str, value: object) -> UsageError:
        return UsageError(f"TonyOperator(task_id={task_id!r}): {name}={value!r}: {allowed}")

    for name in _TEXT_ARGS:
        value = submit_args.get(name)
        if value is not None and not isinstance(value, (str, os.PathLike)):
            raise bad(name, "must be a string (or a path), or None", value)
    for name in _PAIR_ARGS:
        value = submit_args.get(name)
        if value is None or isinstance(value, Mapping):
            continue
        if isinstance(value, str) or not isinstance(value, (list, tuple)) \
                or not all(isinstance(v, str) and "=" in v for v in value):
            raise bad(name, "must be a mapping {KEY: VALUE} or a list of 'KEY=VALUE' strings", value)
    for name, value in (("local", submit_args.get("local", False)), ("deferrable", deferrable)):
        if not isinstance(value, bool):
            raise bad(name, "must be True or False", value)
    if isinstance(poll_interval, bool) or not isinstance(poll_interval, (int, float)) \
            or not math.isfinite(poll_interval) or poll_interval <= 0:
        raise bad("poll_interval", "must be a number of seconds greater than 0", poll_interval)
    if deferrable and submit_args.get("local"):
        raise bad("deferrable", "cannot be True with local=True (a local job has no YARN application to "
                  "poll); use one or the other", deferrable)


# ---- the verdict -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Verdict:
    """How the operator ends: success, or a failure Airflow may retry (the infrastructure's) or
    must not (the job's own, bad input, a kill). exit_code is `tony submit`'s for the same end."""

    succeeded: bool
    retry: bool
    exit_code: int
    reason: str


def job_verdict(final_status: str | None, am_status: Mapping | None, yarn_diagnostics: str = "",
                killed_here: bool = False) -> Verdict:
    """The end of a submitted job, from YARN's final status and the AM's last status.json."""
    if final_status == "SUCCEEDED":
        return Verdict(True, False, EXIT_OK, "the job succeeded")
    if killed_here:
        return Verdict(False, False, EXIT_JOB_FAILED, "the task was killed, and the application with it")
    if final_status == "KILLED":
        return Verdict(False, False, EXIT_JOB_FAILED, "the application was killed outside this task "
                       "(yarn application -kill, tony kill or an administrator)")
    status = am_status or {}
    cause = status.get("root_cause") or None
    if cause:
        kind, code = cause.get("kind"), cause.get("exit_code")
        headline = f"{cause.get('task')}: {cause.get('message', kind)}"
        if kind in INFRASTRUCTURE_KINDS or cause.get("during_preemption_of") \
                or (kind != FailureKind.EXIT_CODE.value and code in INFRASTRUCTURE_EXITS):
            return Verdict(False, True, EXIT_JOB_FAILED, f"the infrastructure failed the job ({kind}): {headline}")
        return Verdict(False, False, EXIT_JOB_FAILED, f"the job failed ({kind}): {headline}")
    if status.get("final_status") or yarn_diagnostics.lstrip().startswith("TonY-py job"):
        # the AM gave its verdict without a failed task: a timeout or a limit of the job's own
        return Verdict(False, False, EXIT_JOB_FAILED, "the job failed: " + _first_line(
            status.get("diagnostics") or yarn_diagnostics))
    # No verdict from the AM at all: its attempts died (a lost node, an OOM-killed JVM, YARN's
    # AM expiry). That is the cluster's failure, not the training code's.
    return Verdict(False, True, EXIT_JOB_FAILED, "the infrastructure failed the job (the AM ended without a "
                   "verdict): " + (_first_line(yarn_diagnostics) or "no diagnostics from YARN"))


def submit_verdict(error: BaseException) -> Verdict:
    """A submit that raised: what `tony submit` exits 2 for (bad input, a missing jar or
    HADOOP_CONF_DIR) is never retried; the cluster being unreachable or failing is the
    infrastructure's."""
    if getattr(error, "exit_code", None) == EXIT_USAGE:  # UsageError, ConfigError, SetupError
        return Verdict(False, False, EXIT_USAGE, f"bad input or set-up, nothing was submitted: {error}")
    if isinstance(error, (TonyError, OSError)):
        return Verdict(False, True, EXIT_JOB_FAILED, f"the cluster failed the submit: {error}")
    return Verdict(False, False, EXIT_JOB_FAILED, f"{type(error).__name__}: {error}")


def _first_line(text: str) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


# ---- the task table, into the task log -----------------------------------------------------------
def task_lines(seen: dict[str, list], tasks: list[Mapping]) -> list[str]:
    """A line per task whose state, attempt or container changed since the last call (seen is
    updated), as `tony submit` prints them to a pipe, with the attempt."""
    return changed_task_lines(seen, list(tasks), attempt=True)


# ---- where the trigger looks ----------------------------------------------------------------------
def rm_urls(tracking_url: str | None, conf_dir: str | None = None) -> list[str]:
    """Where the trigger asks YARN: first the RM the job was submitted to (its tracking URL's
    origin: the client JVM's effective configuration, with any --conf yarn.* override), then
    every RM yarn-site.xml names (an HA pair's other one)."""
    urls = []
    if tracking_url and "://" in tracking_url:
        scheme, rest = tracking_url.split("://", 1)
        urls.append(f"{scheme}://{rest.split('/', 1)[0]}")
    return urls + [u for u in rm_web_urls(conf_dir) if u not in urls]


@dataclass
class FollowState:
    """What the trigger needs to follow an application from any triggerer: it travels through
    Airflow's metadata DB as the trigger's kwargs (JSON-safe; the secret lets it read the AM's
    full task table and root cause, so keep a Fernet key set, which encrypts trigger kwargs)."""

    app_id: str
    rm_urls: list[str]
    poll_interval: float = 5.0
    secret: str | None = None
    seen: dict[str, list] = field(default_factory=dict)

    def to_kwargs(self) -> dict:
        return asdict(self)

    @classmethod
    def from_kwargs(cls, kwargs: Mapping) -> "FollowState":
        if not str(kwargs.get("app_id", "")).startswith("application_"):
            raise ValueError(f"not a YARN application id: {kwargs.get('app_id')!r}")
        return cls(app_id=kwargs["app_id"], rm_urls=list(kwargs.get("rm_urls") or []),
                   poll_interval=float(kwargs.get("poll_interval", 5.0)), secret=kwargs.get("secret"),
                   seen={k: list(v) for k, v in (kwargs.get("seen") or {}).items()})
