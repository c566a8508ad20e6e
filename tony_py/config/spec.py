"""The validated job spec: everything a job is, built from the merged configuration.

Validation happens here, before anything is uploaded or submitted. Every error is a
ConfigError that names the key, says what was found and what is allowed; the client turns it
into a one-line message and exit code 2.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

from tony_py.config import checks
from tony_py.config.layers import TonyConf
from tony_py.config.model import Checked, ModelError
from tony_py.errors import ConfigError, UsageError

FRAMEWORKS = ("tensorflow", "pytorch", "standalone")
DISTRIBUTED_MODES = ("GANG", "FCFS")
CACHE_VISIBILITIES = ("PRIVATE", "PUBLIC")
SPEC_FILE = "tony-spec.json"  # the JobSpec as the AM and every executor read it
CHIEF_TYPE = "chief"
# Second-level names under tony.* that are settings, not job types.
RESERVED_NAMES = frozenset(
    "application am task container containers execution history docker yarn portal keytab "
    "https http secret horovod other python gpu version executor staging".split()
)
# Job types in the order their tasks are listed (and ranked, for PyTorch).
_TYPE_ORDER = ("chief", "master", "worker", "evaluator", "ps")
_INSTANCES_KEY = re.compile(r"^tony\.([^.]+)\.instances$")
_TYPE_NAME = re.compile(r"^[a-z]+$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)b?$", re.IGNORECASE)
_MEMORY_UNIT_MB = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
_BOOL = {"true": True, "false": False}
MAX_INSTANCES = 100_000  # per job type; far beyond any cluster, small enough to plan for


@dataclass(frozen=True)
class Resources(Checked):
    memory_mb: int
    vcores: int
    gpus: int = 0

    def validate(self) -> None:
        if self.memory_mb <= 0 or self.vcores < 1 or self.gpus < 0:
            raise ModelError(f"resources out of range: {self}")

    def describe(self) -> str:
        text = f"{self.memory_mb} MB, {self.vcores} vcores"
        return text + (f", {self.gpus} GPUs" if self.gpus else "")


@dataclass(frozen=True)
class TaskType(Checked):
    name: str
    instances: int
    resources: Resources
    node_label: str | None = None
    command: str | None = None

    def validate(self) -> None:
        if not _TYPE_NAME.match(self.name) or not 1 <= self.instances <= MAX_INSTANCES:
            raise ModelError(f"bad job type {self.name!r} with {self.instances} instances")


@dataclass(frozen=True)
class TaskId:
    """One task of the job, e.g. worker:1."""

    type: str
    index: int

    def __str__(self) -> str:
        return f"{self.type}:{self.index}"

    @classmethod
    def parse(cls, text: str) -> "TaskId":
        name, sep, idx = text.partition(":")
        if not sep or not idx.isdigit():
            raise ValueError(f"not a task id: {text!r}")
        return cls(name, int(idx))


@dataclass(frozen=True)
class JobSpec(Checked):
    name: str
    framework: str
    queue: str
    types: tuple[TaskType, ...]
    am: Resources
    app_type: str = "TONY"
    tags: tuple[str, ...] = ()
    node_label: str | None = None
    distributed_mode: str = "GANG"
    timeout_ms: int = 0
    am_retry_count: int = 0
    retryable_exit_codes: frozenset[int] = frozenset()
    retry_on_signal: bool = True
    retry_on_infrastructure: bool = True
    untracked: frozenset[str] = frozenset({"ps"})
    sidecar: frozenset[str] = frozenset({"tensorboard"})
    stop_on_failure: frozenset[str] = frozenset({"ps"})
    fail_on_worker_failure: bool = False
    security_enabled: bool = True
    heartbeat_interval_ms: int = 1000
    max_missed_heartbeats: int = 5
    metrics_interval_ms: int = 5000
    execution_timeout_ms: int = 0
    registry_timeout_s: int = 0
    allocation_timeout_ms: int = 600_000
    registration_timeout_ms: int = 600_000
    progress_timeout_ms: int = 0
    after_chief_timeout_ms: int = 300_000
    max_failures_per_node: int = 3
    am_max_attempts: int = 2
    am_lost_timeout_s: int = 60
    client_stop_wait_s: int = 15
    command: str | None = None
    container_env: dict[str, str] = field(default_factory=dict)
    execution_env: dict[str, str] = field(default_factory=dict)
    cache_visibility: str = "PRIVATE"

    def validate(self) -> None:
        """Invariants every JobSpec holds, however it was made (build_job_spec names the
        offending config key; this guards the file the AM and executors read)."""
        if self.framework not in FRAMEWORKS or self.distributed_mode not in DISTRIBUTED_MODES:
            raise ModelError(f"framework {self.framework!r} / mode {self.distributed_mode!r} not allowed")
        if not self.types or len({t.name for t in self.types}) != len(self.types):
            raise ModelError("job types must be present and unique")
        if self.cache_visibility not in CACHE_VISIBILITIES:
            raise ModelError(f"cache visibility {self.cache_visibility!r} not allowed")
        for t in self.types:
            if not (t.command or self.command):
                raise ModelError(f"job type {t.name} has no command")
        if self.heartbeat_interval_ms < 100 or self.max_missed_heartbeats < 1 or self.am_max_attempts < 1:
            raise ModelError("heartbeat settings out of range")

    # ---- derived views ---------------------------------------------------------------------
    def type(self, name: str) -> TaskType:
        for t in self.types:
            if t.name == name:
                return t
        raise KeyError(name)

    def type_names(self) -> list[str]:
        return [t.name for t in self.types]

    def tasks(self) -> list[TaskId]:
        return [TaskId(t.name, i) for t in self.types for i in range(t.instances)]

    def chief(self) -> TaskId:
        """TonY's rule: `chief:0` if there is a chief type, else `worker:0`."""
        names = self.type_names()
        if CHIEF_TYPE in names:
            return TaskId(CHIEF_TYPE, 0)
        if "worker" in names:
            return TaskId("worker", 0)
        return self.tasks()[0]

    def is_tracked(self, type_name: str) -> bool:
        return type_name not in self.untracked and type_name not in self.sidecar

    def tracked_tasks(self) -> list[TaskId]:
        return [t for t in self.tasks() if self.is_tracked(t.type)]

    def command_for(self, type_name: str) -> str:
        cmd = self.type(type_name).command or self.command
        assert cmd, "validated in build_job_spec"
        return cmd


# ---- value parsers (each raises ConfigError naming the key) -----------------------------------
def parse_memory_mb(value: str, key: str) -> int:
    """`2g`, `2048m`, `2048` (a bare number is MB), `1.5g`; rounded up to whole MB."""
    m = _MEMORY.match(value.strip()) if value is not None else None
    if not m or len(m.group(1)) > 15:
        raise ConfigError(key, f"bad memory size {value!r}: use e.g. 2g, 2048m or 2048 (MB)")
    mb = math.ceil(float(m.group(1)) * _MEMORY_UNIT_MB[m.group(2).lower()])
    if mb <= 0:
        raise ConfigError(key, f"memory must be more than 0, got {value!r}")
    return mb


def _int(conf: TonyConf, key: str, default: int, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = conf.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(key, f"must be a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(key, f"must be <= {maximum}, got {value}")
    return value


def _bool(conf: TonyConf, key: str, default: bool) -> bool:
    raw = (conf.get(key) or "").strip().lower()
    if raw == "":
        return default
    if raw not in _BOOL:
        raise ConfigError(key, f"must be true or false, got {conf.get(key)!r}")
    return _BOOL[raw]


def _list(conf: TonyConf, key: str, default: str = "") -> tuple[str, ...]:
    raw = conf.get(key, default) or ""
    return tuple(x.strip() for x in raw.split(",") if x.strip())


def _int_set(conf: TonyConf, key: str) -> frozenset[int]:
    out = set()
    for item in _list(conf, key):
        try:
            out.add(int(item))
        except ValueError:
            raise ConfigError(key, f"must be a comma-separated list of exit codes, got {item!r}") from None
    return frozenset(out)


def parse_env_list(raw: str | None, key: str, for_yarn: bool = False) -> dict[str, str]:
    """`K=V,K2=V2` (TonY's format for tony.containers.envs / tony.execution.envs). Values for
    the container (for_yarn) pass through YARN's launch script and must be safe there."""
    env: dict[str, str] = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name.strip()):
            raise ConfigError(key, f"bad entry {item!r}: expected NAME=value")
        if for_yarn:
            checks.launch_value(key, value, what=f"value of {name.strip()}")
        env[name.strip()] = value
    return env


def _resources(conf: TonyConf, prefix: str) -> Resources:
    return Resources(
        memory_mb=parse_memory_mb(conf.get(f"{prefix}.memory", "2g"), f"{prefix}.memory"),
        vcores=_int(conf, f"{prefix}.vcores", 1, minimum=1),
        gpus=_int(conf, f"{prefix}.gpus", 0, minimum=0),
    )


def _type_sort_key(name: str) -> tuple[int, str]:
    return (_TYPE_ORDER.index(name) if name in _TYPE_ORDER else len(_TYPE_ORDER), name)


def job_type_names(conf: TonyConf) -> list[str]:
    """Job types from tony.<type>.instances keys; type names are lowercase letters."""
    names = []
    for key in conf.keys():
        m = _INSTANCES_KEY.match(key)
        if not m:
            continue
        name = m.group(1)
        if name in RESERVED_NAMES:
            continue
        if not _TYPE_NAME.match(name):
            raise ConfigError(key, f"job type {name!r} is not allowed: type names are lowercase letters (a-z)")
        names.append(name)
    return sorted(names, key=_type_sort_key)


def build_job_spec(conf: TonyConf) -> JobSpec:
    """The validated spec; an error names the key and the file (or flag) that set it."""
    try:
        return _build_job_spec(conf)
    except ConfigError as exc:
        if exc.origin is None and exc.key in conf:
            raise exc.with_origin(conf.origin(exc.key)) from None
        raise


def _build_job_spec(conf: TonyConf) -> JobSpec:
    framework = (conf.get("tony.application.framework") or "tensorflow").strip().lower()
    if framework not in FRAMEWORKS:
        raise ConfigError(
            "tony.application.framework",
            f"unknown framework {conf.get('tony.application.framework')!r}; allowed: {', '.join(FRAMEWORKS)}",
        )
    mode = (conf.get("tony.application.distributed-mode") or "GANG").strip().upper()
    if mode not in DISTRIBUTED_MODES:
        raise ConfigError(
            "tony.application.distributed-mode",
            f"must be one of {', '.join(DISTRIBUTED_MODES)}, got {conf.get('tony.application.distributed-mode')!r}",
        )
    default_command = (conf.get("tony.containers.command") or "").strip() or None
    sidecar = frozenset(_list(conf, "tony.application.sidecar.jobtypes", "tensorboard"))

    types: list[TaskType] = []
    for name in job_type_names(conf):
        key = f"tony.{name}.instances"
        instances = _int(conf, key, 0, minimum=0, maximum=MAX_INSTANCES)
        max_instances = _int(conf, f"tony.{name}.max-instances", -1)
        if 0 <= max_instances < instances:
            raise ConfigError(key, f"{instances} instances exceed tony.{name}.max-instances={max_instances}")
        resources = _resources(conf, f"tony.{name}")
        if instances == 0:
            continue
        command = (conf.get(f"tony.{name}.command") or "").strip() or None
        if command is None and default_command is None:
            raise UsageError(
                f"no command for job type {name!r}: pass --executes (or set tony.{name}.command)"
            )
        label = (conf.get(f"tony.{name}.node-label") or "").strip() or None
        types.append(TaskType(name, instances, resources, label, command))
    if not types:
        raise ConfigError(
            "tony.worker.instances",
            "no tasks to run: set tony.<type>.instances > 0 for at least one job type "
            "(e.g. tony.worker.instances=2)",
        )

    total = sum(t.instances for t in types)
    max_total = _int(conf, "tony.task.max-total-instances", -1)
    if 0 <= max_total < total:
        raise ConfigError("tony.task.max-total-instances", f"the job has {total} tasks, more than {max_total}")
    total_gpus = sum(t.instances * t.resources.gpus for t in types)
    max_gpus = _int(conf, "tony.task.max-total-gpus", -1)
    if 0 <= max_gpus < total_gpus:
        raise ConfigError("tony.task.max-total-gpus", f"the job asks for {total_gpus} GPUs, more than {max_gpus}")

    spec = JobSpec(
        name=conf.get("tony.application.name") or "TonyApplication",
        framework=framework,
        queue=(conf.get("tony.yarn.queue") or "default").strip(),
        types=tuple(types),
        am=_resources(conf, "tony.am"),
        app_type=(conf.get("tony.application.type") or "TONY").strip(),
        tags=_list(conf, "tony.application.tags"),
        node_label=(conf.get("tony.application.node-label") or "").strip() or None,
        distributed_mode=mode,
        timeout_ms=_int(conf, "tony.application.timeout", 0, minimum=0),
        am_retry_count=_int(conf, "tony.am.retry-count", 0, minimum=0),
        retryable_exit_codes=_int_set(conf, "tony.application.retryable-exit-codes"),
        retry_on_signal=_bool(conf, "tony.application.retry-on-signal", True),
        retry_on_infrastructure=_bool(conf, "tony.application.retry-on-infrastructure-failure", True),
        untracked=frozenset(_list(conf, "tony.application.untracked.jobtypes", "ps")),
        sidecar=sidecar,
        stop_on_failure=frozenset(_list(conf, "tony.application.stop-on-failure-jobtypes", "ps")),
        fail_on_worker_failure=_bool(conf, "tony.application.fail-on-worker-failure-enabled", False),
        security_enabled=_bool(conf, "tony.application.security.enabled", True),
        heartbeat_interval_ms=_int(conf, "tony.task.heartbeat-interval-ms", 1000, minimum=100),
        max_missed_heartbeats=_int(conf, "tony.task.max-missed-heartbeats", 5, minimum=1),
        metrics_interval_ms=_int(conf, "tony.task.metrics-interval-ms", 5000, minimum=100),
        execution_timeout_ms=_int(conf, "tony.task.executor.execution-timeout-ms", 0, minimum=0),
        registry_timeout_s=_int(conf, "tony.task.executor.registry-timeout-sec", 0, minimum=0),
        allocation_timeout_ms=_int(conf, "tony.container.allocation.timeout", 600_000, minimum=-1),
        registration_timeout_ms=_int(conf, "tony.container.registration.timeout", 600_000, minimum=-1),
        progress_timeout_ms=_int(conf, "tony.task.progress-timeout-ms", 0, minimum=0),
        after_chief_timeout_ms=_int(conf, "tony.application.after-chief-timeout-ms", 300_000, minimum=-1),
        max_failures_per_node=_int(conf, "tony.task.max-failures-per-node", 3, minimum=0),
        am_max_attempts=_int(conf, "tony.am.max-attempts", 2, minimum=1),
        am_lost_timeout_s=_int(conf, "tony.task.executor.am-lost-timeout-sec", 60, minimum=1),
        client_stop_wait_s=_int(conf, "tony.am.wait-client-signal-stop-timeout-sec", 15, minimum=0),
        command=default_command,
        container_env=parse_env_list(conf.get("tony.containers.envs"), "tony.containers.envs", for_yarn=True),
        execution_env=parse_env_list(conf.get("tony.execution.envs"), "tony.execution.envs"),
        cache_visibility=_choice(conf, "tony.staging.cache-visibility", CACHE_VISIBILITIES, "PRIVATE"),
    )
    _check_framework(spec)
    spec.validate()
    return spec


def _choice(conf: TonyConf, key: str, allowed: tuple[str, ...], default: str) -> str:
    raw = (conf.get(key) or "").strip()
    if not raw:
        return default
    if raw.upper() not in allowed:
        raise ConfigError(key, f"must be one of {', '.join(allowed)}, got {raw!r}")
    return raw.upper()


def _check_framework(spec: JobSpec) -> None:
    if spec.framework == "standalone" and len(spec.tasks()) != 1:
        raise ConfigError(
            "tony.application.framework",
            f"standalone runs exactly one task, but the job has {len(spec.tasks())} "
            f"({', '.join(f'tony.{t.name}.instances={t.instances}' for t in spec.types)})",
        )
    if spec.framework == "pytorch" and not ({"chief", "master", "worker"} & set(spec.type_names())):
        raise ConfigError(
            "tony.worker.instances", "pytorch needs trainer tasks: set tony.worker.instances > 0"
        )
    if not spec.tracked_tasks():
        raise ConfigError(
            "tony.application.untracked.jobtypes",
            "every job type is untracked, so the job could never finish; track at least one",
        )


# ---- does the job fit the cluster? -------------------------------------------------------------
GPU_RESOURCE = "yarn.io/gpu"


def check_fits(spec: JobSpec, cluster: dict) -> None:
    """Reject a container that no running node can hold (TonY waits forever instead), and a
    node label that no running node carries (YARN would accept the application and never run it).

    `cluster` is {"resource_types": [...], "nodes": [{"id", "labels", "capability": {memory-mb,
    vcores, yarn.io/gpu}}]}, as the client bridge reports it. A request without a label can only
    use nodes without one (YARN's default partition); a labelled one only nodes with its label.
    """
    nodes = cluster.get("nodes") or []
    if not nodes:
        raise UsageError("the cluster has no RUNNING NodeManager; nothing could run")
    wants = [("tony.am", spec.am, spec.node_label, "tony.application.node-label")] + [
        (f"tony.{t.name}", t.resources, t.node_label or spec.node_label,
         f"tony.{t.name}.node-label" if t.node_label else "tony.application.node-label")
        for t in spec.types
    ]
    if any(res.gpus for _, res, _, _ in wants) and GPU_RESOURCE not in cluster.get("resource_types", []):
        key = next(f"{p}.gpus" for p, res, _, _ in wants if res.gpus)
        raise ConfigError(key, f"GPUs requested, but the cluster does not schedule {GPU_RESOURCE}")
    labels = sorted({label for n in nodes for label in (n.get("labels") or [])})
    for prefix, res, label, label_key in wants:
        eligible = [n for n in nodes if (label in (n.get("labels") or [])) if label] if label else \
            [n for n in nodes if not n.get("labels")]
        if label and not eligible:
            raise ConfigError(label_key, f"no running node carries the label {label!r} (labels on running nodes: "
                                         f"{', '.join(labels) if labels else 'none'})")
        if not eligible:
            raise UsageError(f"every running node has a node label; set tony.application.node-label to one of "
                             f"{', '.join(labels)}")
        if any(_node_holds(n["capability"], res) for n in eligible):
            continue
        where = f" with label {label!r}" if label else (" without a label" if labels else "")
        for attr, cap_key, unit in (("gpus", GPU_RESOURCE, "GPUs"), ("memory_mb", "memory-mb", "MB"), ("vcores", "vcores", "vcores")):
            most = max(n["capability"].get(cap_key, 0) for n in eligible)
            if getattr(res, attr) > most:
                key = {"memory_mb": "memory"}.get(attr, attr)
                raise ConfigError(
                    f"{prefix}.{key}",
                    f"asks for {getattr(res, attr)} {unit} per container but the largest node{where} has {most} "
                    f"({len(eligible)} node(s) running)",
                )
        cap = max(eligible, key=lambda n: (n["capability"].get(GPU_RESOURCE, 0), n["capability"].get("memory-mb", 0)))["capability"]
        raise ConfigError(
            f"{prefix}.memory",
            f"no single node{where} can hold {res.describe()} (largest: {cap.get('memory-mb')} MB, "
            f"{cap.get('vcores')} vcores, {cap.get(GPU_RESOURCE, 0)} GPUs)",
        )


def _node_holds(cap: dict, res: Resources) -> bool:
    return (
        cap.get("memory-mb", 0) >= res.memory_mb
        and cap.get("vcores", 0) >= res.vcores
        and cap.get(GPU_RESOURCE, 0) >= res.gpus
    )
