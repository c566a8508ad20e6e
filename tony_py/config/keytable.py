"""Every `tony.*` key TonY-py reads, declared once: its type, default, bounds and one line of doc.

The spec's builders (build.py, shapes.py) read keys through `read()`, so a key's default and
bounds live here only; keys.py derives the supported-key list from this table, the
configuration page's key table is generated from it (`python -m tony_py.config.keytable`),
and a unit test holds `tony-default.xml`, that page and every key named in the code to it.
Like Spark's ConfigBuilder: one declaration per key, where a reader of the code looks first.

Names with `<type>` are read for every job type (`tony.worker.memory`); `<G>` is a group's name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tony_py.config.layers import TonyConf
from tony_py.config.spec import (CACHE_VISIBILITIES, DISTRIBUTED_MODES, FRAMEWORKS, GPU_ASSIGNMENTS, MAX_INSTANCES,
                                 MAX_NPROC_PER_NODE, TENSORBOARD_TYPE)

TYPE = "<type>"
KINDS = ("int", "bool", "text", "list", "choice", "memory", "env", "container-env", "exit-codes", "resources")


@dataclass(frozen=True)
class Key:
    name: str
    kind: str
    default: object  # the typed default (None: not set)
    doc: str
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str, ...] = ()
    shown: str | None = None  # the default as the page shows it, where the value alone says too little
    xml: str | None = None  # what tony-default.xml carries when it is not the default (TonY's placeholders)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"{self.name}: kind {self.kind!r} is not one of {KINDS}")
        if self.kind == "choice" and self.default not in self.choices:
            raise ValueError(f"{self.name}: default {self.default!r} is not one of its choices")

    @property
    def per_type(self) -> bool:
        return TYPE in self.name

    def text_default(self) -> str:
        """The default as a config file spells it ('' for none)."""
        if self.default is None:
            return ""
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, tuple):
            return ",".join(self.default)
        return str(self.default)

    def shown_default(self) -> str:
        return self.shown or self.text_default() or "–"


def _k(name, kind, default, doc, **bounds) -> Key:
    return Key(name, kind, default, doc, **bounds)


KEYS: tuple[Key, ...] = (
    # ---- the application ----------------------------------------------------------------------
    _k("tony.application.name", "text", "TensorFlowApplication", "the YARN application name"),
    _k("tony.application.type", "text", "TONY", "the YARN application type"),
    _k("tony.application.tags", "list", (), "YARN application tags (TonY-py adds `tony-py`; Hadoop's "
       "`mapreduce.job.tags` are added too)"),
    _k("tony.application.framework", "choice", "tensorflow", "`" + "`, `".join(FRAMEWORKS) + "`",
       choices=FRAMEWORKS),
    _k("tony.application.distributed-mode", "choice", "GANG", "`GANG`: the spec is served once every task "
       "registered; `FCFS`: at once", choices=DISTRIBUTED_MODES),
    _k("tony.yarn.queue", "text", "default", "the YARN queue"),
    _k("tony.application.node-label", "text", None, "the node label of every container without one of its own"),
    _k("tony.application.priority", "int", 0, "YARN application priority (effective up to the cluster's "
       "`yarn.cluster.max-application-priority`)", minimum=0),
    _k("tony.application.timeout", "int", 0, "ms; the AM fails the job after it, and YARN's application lifetime "
       "is set to it plus 60 s, so the RM ends the job even with no client or AM left to", minimum=0,
       shown="0 (none)"),
    _k("tony.application.id", "text", None, "set by the client in `tony-final.xml`: the application's id"),
    _k("tony.application.security.enabled", "bool", True, "fetch HDFS delegation tokens for the AM when Hadoop "
       "security is on"),
    _k("tony.application.view-acls", "list", (), "users besides the owner who see the job's detail through "
       "YARN's proxy (`*`: everyone)"),
    _k("tony.application.diagnostics.include-logs", "bool", False, "put the root cause's stderr tail and "
       "traceback into YARN's diagnostics too (every user of a cluster without ACLs can read them)"),
    _k("tony.application.hdfs-conf-path", "text", None, "an `hdfs-site.xml` that overrides `HADOOP_CONF_DIR`'s "
       "for this job (client and AM)"),
    _k("tony.application.yarn-conf-path", "text", None, "a `yarn-site.xml` that overrides `HADOOP_CONF_DIR`'s "
       "for this job"),
    _k("tony.application.mapred-conf-path", "text", None, "a `mapred-site.xml` that overrides "
       "`HADOOP_CONF_DIR`'s for this job"),
    _k("tony.other.namenodes", "list", (), "more file systems to fetch delegation tokens for (Kerberos)"),
    _k("tony.staging.cache-visibility", "choice", "PRIVATE", "`PRIVATE`: the cached venv/runtime are 0600 on "
       "HDFS and localized once per user per node; `PUBLIC`: world-readable and shared by every user of a "
       "node (only for venvs that hold nothing secret)", choices=CACHE_VISIBILITIES),
    _k("tony.keytab.user", "text", None, "the principal the AM renews the job's tokens as, with "
       "`tony.keytab.location` ([Kerberos clusters](kerberos.md))"),
    _k("tony.keytab.location", "text", None, "the keytab the AM renews the job's tokens with"),
    # ---- job types ---------------------------------------------------------------------------
    _k("tony.<type>.instances", "int", 0, "tasks of the type", minimum=0, maximum=MAX_INSTANCES),
    _k("tony.<type>.memory", "memory", "2g", "per task of the type (`2g`, `2048m`, `1.5g`; a bare number is "
       "MB); a Ray head's default is more (its own daemons)"),
    _k("tony.<type>.vcores", "int", 1, "per task of the type", minimum=1),
    _k("tony.<type>.gpus", "int", 0, "per task of the type", minimum=0),
    _k("tony.<type>.max-instances", "int", -1, "a bound on `tony.<type>.instances` (-1: none)"),
    _k("tony.<type>.min-instances", "int", None, "with fewer than `instances` (GANG; tensorflow, pytorch, jax): "
       "a task YARN cannot place within the allocation timeout is parked and the gang goes on with the "
       "rest, renumbered; the next restart asks for it again ([A smaller gang](failures.md#a-smaller-gang))",
       minimum=1, shown="= instances"),
    _k("tony.<type>.nproc-per-node", "int", 1, "more than 1: each task of the type runs its command under "
       "torchrun with this many processes (pytorch trainer types only, see "
       "[PyTorch under torchrun](task-environment.md#pytorch-under-torchrun))", minimum=1,
       maximum=MAX_NPROC_PER_NODE),
    _k("tony.<type>.command", "text", None, "the type's command (else `tony.containers.command`)"),
    _k("tony.<type>.node-label", "text", None, "the type's node label"),
    _k("tony.<type>.resources", "resources", None, "like `tony.containers.resources`, for that type only"),
    _k("tony.<type>.placement-spec", "text", None, "a YARN placement constraint for the type, e.g. "
       "`notin,node,worker` (one worker per node); no node label may be set beside it "
       "(see [Job shapes](job-shapes.md#placement-constraints))"),
    _k("tony.<type>.allocation-tags", "list", (), "the type's allocation tags (default with a placement spec: "
       "its name)"),
    _k("tony.containers.command", "text", None, "the command of every type; `--executes` sets it"),
    _k("tony.containers.placement-spec", "text", None, "a placement constraint for every type without its own"),
    _k("tony.containers.allocation-tags", "list", (), "allocation tags for every type without its own"),
    _k("tony.containers.envs", "container-env", None, "`K=V,K2=V2` for every container's environment"),
    _k("tony.execution.envs", "env", None, "`K=V,K2=V2` for the user process's environment"),
    _k("tony.containers.resources", "resources", None, "`PATH[::NAME][#archive]`, localized into every task; "
       "empty entries are ignored, a file listed twice is localized once, a local directory is zipped into "
       "an archive, a remote directory contributes its files"),
    _k("tony.application.placement-spec", "text", None, "an application-wide placement constraint"),
    _k("tony.task.max-total-instances", "int", -1, "a bound on the job's tasks (-1: none)"),
    _k("tony.task.max-total-gpus", "int", -1, "a bound on the job's GPUs (-1: none)"),
    _k("tony.gpu.assignment", "choice", "auto", "`auto`: each task's `CUDA_VISIBLE_DEVICES` names its own "
       "devices; `none`: tasks choose (see [GPUs](gpus.md))", choices=GPU_ASSIGNMENTS),
    # ---- roles and stages --------------------------------------------------------------------
    _k("tony.application.untracked.jobtypes", "list", ("ps",), "tasks the job does not wait for; stopped at "
       "the end"),
    _k("tony.application.sidecar.jobtypes", "list", (TENSORBOARD_TYPE,), "tasks that never decide the job's "
       "outcome"),
    _k("tony.application.stop-on-failure-jobtypes", "list", ("ps",), "a failure of these fails the job"),
    _k("tony.application.fail-on-worker-failure-enabled", "bool", False, "any failed worker fails the job"),
    _k("tony.application.prepare-stage", "list", (), "job types run first"),
    _k("tony.application.training-stage", "list", (), "job types run after every tracked prepare task "
       "succeeded"),
    _k("tony.application.group.<G>", "list", (), "job types of a group (see "
       "[Job shapes](job-shapes.md#group-dependency-timeouts))"),
    _k("tony.application.dependency.<type>.timeout.after.<G>", "int", 0, "seconds the type may run on after "
       "the group's tasks ended (see [Job shapes](job-shapes.md#group-dependency-timeouts))", minimum=0),
    _k("tony.application.dependency.<type>.timeout.after.<G>.ignored", "bool", False, "the timeout ends the "
       "type's tasks without failing the job"),
    _k("tony.application.tensorboard-log-dir", "text", None, "starts the sidecar TensorBoard on this log dir "
       "(`tony.tensorboard.{memory,vcores,gpus,command}`: 2g, 2, 0, TonY-py's)"),
    _k("tony.am.command", "text", None, "the command of a single-node job (no `tony.<type>.instances`)"),
    # ---- restarts and failures ---------------------------------------------------------------
    _k("tony.am.retry-count", "int", 0, "gang restarts after retryable failures", minimum=0),
    _k("tony.application.retryable-exit-codes", "exit-codes", None, "user exit codes that count as retryable"),
    _k("tony.application.retry-on-signal", "bool", True, "a task killed by a signal is retryable"),
    _k("tony.application.retry-on-infrastructure-failure", "bool", True, "a task lost to the cluster is "
       "retryable"),
    _k("tony.application.max-infrastructure-restarts", "int", 10, "gang restarts after the cluster's doing "
       "(preemption, a lost node, failed disks: YARN's exit statuses −102, −108, −100, −101, −106), apart "
       "from `tony.am.retry-count` ([Preemption](failures.md#preemption))", minimum=0),
    _k("tony.task.max-failures-per-node", "int", 3, "a node with this many non-user task failures is "
       "blacklisted for the job (0: never)", minimum=0),
    _k("tony.am.max-attempts", "int", 2, "YARN attempts of the AM; a new attempt re-adopts the running tasks",
       minimum=1),
    _k("tony.horovod.mode.test", "bool", False, "Horovod's test mode (TonY's)"),
    _k("tony.horovod.mode.test.fast.fail", "bool", False, "Horovod's test mode, failing fast (TonY's)"),
    _k("tony.horovod.driver.mode.debug", "bool", False, "run your own Horovod driver (`tony.driver.*`)"),
    # ---- time --------------------------------------------------------------------------------
    _k("tony.am.startup-timeout", "int", 0, "ms; the client kills an application still ACCEPTED after it, and "
       "says why", minimum=0, shown="0 (none)"),
    _k("tony.task.heartbeat-interval-ms", "int", 1000, "how often an executor beats; a silent executor is lost "
       "after `tony.task.max-missed-heartbeats` of them (TonY: 25 s)", minimum=100),
    _k("tony.task.max-missed-heartbeats", "int", 5, "beats an executor may miss before it is lost", minimum=1),
    _k("tony.task.metrics-interval-ms", "int", 5000, "how often executors measure their task's process-tree "
       "RSS", minimum=100),
    _k("tony.task.gpu-metrics.enabled", "bool", True, "GPU metrics for tasks that hold GPUs"),
    _k("tony.task.executor.execution-timeout-ms", "int", 0, "the task's process group is killed after it",
       minimum=0, shown="0 (none)"),
    _k("tony.task.executor.registry-timeout-sec", "int", 0, "an executor that gets no cluster spec this long "
       "after registering exits", minimum=0, shown="0 (none)"),
    _k("tony.task.executor.am-lost-timeout-sec", "int", 60, "an executor that cannot reach its AM this long "
       "exits (its task was killed when its lease ran out)", minimum=1),
    _k("tony.task.executor.lease-sec", "int", 10, "an executor that has not reached its AM this long kills its "
       "task, and the AM starts no replacement of a task before this long (plus 2 s) after it last heard "
       "from it; at least two heartbeat intervals (see "
       "[Fencing](failures.md#no-two-copies-of-a-task-fencing))", minimum=1),
    _k("tony.task.progress-timeout-ms", "int", 0, "a running task that reports no progress this long is hung",
       minimum=0, shown="0 (off)"),
    _k("tony.container.allocation.timeout", "int", 600_000, "ms to get every container (TonY: none — GANG "
       "waited forever)", minimum=-1),
    _k("tony.container.registration.timeout", "int", 600_000, "ms for a started container's executor to "
       "register", minimum=-1),
    _k("tony.application.after-chief-timeout-ms", "int", 300_000, "tasks still running this long after the "
       "chief succeeded are stopped (-1: wait)", minimum=-1),
    _k("tony.am.wait-client-signal-stop-timeout-sec", "int", 15, "how long the finished AM waits for the "
       "client to read the final table", minimum=0),
    # ---- the AM and the executors ------------------------------------------------------------
    _k("tony.am.memory", "memory", "2g", "the AM container's memory"),
    _k("tony.am.vcores", "int", 1, "the AM container's vcores", minimum=1),
    _k("tony.am.gpus", "int", 0, "the AM container's GPUs", minimum=0),
    _k("tony.am.python", "text", "python3", "the AM's interpreter"),
    _k("tony.executor.python", "text", None, "the executors' interpreter (set by the client: the job's "
       "python)", shown="the job's python"),
    _k("tony.am.class-data-sharing", "bool", True, "the AM's JVM maps a class-data archive its first run on "
       "each node wrote (starts ~0.3 s sooner); false: no archive"),
    # ---- Docker ------------------------------------------------------------------------------
    _k("tony.docker.enabled", "bool", False, "YARN's Docker runtime for the containers"),
    _k("tony.docker.containers.image", "text", None, "the image of every container without its own"),
    _k("tony.docker.<type>.image", "text", None, "the image of a type's containers (`am`: the AM's)"),
    _k("tony.docker.containers.mount", "text", None, "`SRC:DST:MODE,...` mounted into every container"),
    # ---- history -----------------------------------------------------------------------------
    _k("tony.history.location", "text", None, "where job history is kept (see "
       "[Watching a job](observability.md#history))", shown="`<home>/.tony/history`",
       xml="/path/to/tony-history"),
    _k("tony.history.intermediate", "text", None, "history of running jobs", shown="`<location>/intermediate`",
       xml="/path/to/tony-history/intermediate"),
    _k("tony.history.finished", "text", None, "history of finished jobs", shown="`<location>/finished`",
       xml="/path/to/tony-history/finished"),
    _k("tony.history.retention-sec", "int", 30 * 24 * 3600, "how long finished jobs' history is kept",
       minimum=0, shown="2592000 (30 days)"),
    _k("tony.portal.url", "text", None, "where `tony portal` serves this cluster's history; the client prints "
       "the job's link there when it ends"),
)

BY_NAME: dict[str, Key] = {k.name: k for k in KEYS}
if len(BY_NAME) != len(KEYS):
    raise ValueError("a key is declared twice")
_PLACEHOLDERS = {"<type>": "[A-Za-z]+", "<G>": "[A-Za-z]+"}  # (a type name with capitals is refused where types are read)


def _pattern(name: str) -> re.Pattern:
    escaped = re.escape(name)
    for placeholder, part in _PLACEHOLDERS.items():
        escaped = escaped.replace(re.escape(placeholder), f"({part})")
    return re.compile(f"^{escaped}$")


# Keys with a name inside, most specific first (a family's own keys before tony.<type>.*).
TEMPLATES: tuple[tuple[re.Pattern, Key], ...] = tuple(sorted(
    ((_pattern(k.name), k) for k in KEYS if any(p in k.name for p in _PLACEHOLDERS)),
    key=lambda pk: -len(pk[1].name)))


def lookup(name: str) -> Key | None:
    """The declaration of a key as a config file names it (`tony.worker.memory`), or None."""
    found = BY_NAME.get(name)
    if found is not None:
        return found
    return next((k for pattern, k in TEMPLATES if pattern.match(name)), None)


def page_table() -> str:
    """The configuration page's table of keys (docs/configuration.md, between its markers)."""
    rows = ["| key | default | |", "|---|---|---|"]
    rows += [f"| `{k.name}` | {k.shown_default()} | {k.doc} |" for k in KEYS]
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # python -m tony_py.config.keytable > the table for the page
    print(page_table(), end="")
