"""The validated job spec: everything a job is, as the client, the AM and every executor see it.

`build.build_job_spec` makes it from the merged configuration (naming the offending key on
every error); it travels to the AM as `tony-spec.json` (and from the AM to the executors, or
localized beside them on a Kerberos cluster), a checked round trip (config/model.py) that
refuses anything it does not know.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property

from tony_py.config.model import Checked, ModelError
from tony_py.config.traits import FRAMEWORKS, traits

DISTRIBUTED_MODES = ("GANG", "FCFS")
CACHE_VISIBILITIES = ("PRIVATE", "PUBLIC")
GPU_ASSIGNMENTS = ("auto", "none")
SPEC_FILE = "tony-spec.json"  # the JobSpec as the AM and every executor read it
FINAL_CONF_FILE = "tony-final.xml"  # TonY's resolved configuration, beside it
CHIEF_TYPE = "chief"
SINGLE_NODE_TYPE = "driver"  # the one task of a single-node job, run in the AM's container (TonY's name)
TENSORBOARD_TYPE = "tensorboard"
NOTEBOOK_TYPE = "notebook"  # TonY's notebook job type: `tony notebook` runs one task of it
HOROVOD_DRIVER_TYPE = "driver"
RAY_HEAD_TYPE = "head"  # a ray job's head node, which runs the driver: its chief
# Job types in the order their tasks are listed (and ranked, for PyTorch).
TYPE_ORDER = ("chief", "master", "worker", "evaluator", "ps")
TYPE_NAME = re.compile(r"^[a-z]+$")
MAX_INSTANCES = 100_000  # per job type; far beyond any cluster, small enough to plan for
MAX_NPROC_PER_NODE = 1024  # processes torchrun starts in one task: more than any node has cores


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
    placement_spec: str | None = None  # a YARN placement constraint expression (SchedulingRequests)
    allocation_tags: tuple[str, ...] = ()
    docker_image: str | None = None
    min_instances: int | None = None  # None: instances (no shrinking); else the gang may go on with this many
    nproc_per_node: int = 1  # > 1: each task runs its command under torchrun with this many processes

    def validate(self) -> None:
        if not TYPE_NAME.match(self.name) or not 1 <= self.instances <= MAX_INSTANCES:
            raise ModelError(f"bad job type {self.name!r} with {self.instances} instances")
        if not 1 <= self.nproc_per_node <= MAX_NPROC_PER_NODE:
            raise ModelError(f"job type {self.name!r}: {self.nproc_per_node} processes per task")
        if self.min_instances is not None and not 1 <= self.min_instances <= self.instances:
            raise ModelError(f"job type {self.name!r}: min_instances {self.min_instances} not in 1..{self.instances}")

    @property
    def fewest(self) -> int:
        """How many tasks of the type the gang needs at least (tony.<type>.min-instances)."""
        return self.instances if self.min_instances is None else self.min_instances


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
class DependencyTimeout(Checked):
    """tony.application.dependency.<type>.timeout.after.<group>=<seconds>[.ignored]: once every
    task of the group finished, tasks of `type` may run `seconds` longer."""

    type: str
    group: str
    seconds: int
    ignored: bool = False  # past the timeout the type becomes untracked instead of failing the job


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
    priority: int = 0
    distributed_mode: str = "GANG"
    timeout_ms: int = 0
    startup_timeout_ms: int = 0
    am_retry_count: int = 0
    retryable_exit_codes: frozenset[int] = frozenset()
    retry_on_signal: bool = True
    retry_on_infrastructure: bool = True
    max_infrastructure_restarts: int = 10  # preemption, lost nodes: apart from am_retry_count
    untracked: frozenset[str] = frozenset({"ps"})
    sidecar: frozenset[str] = frozenset({TENSORBOARD_TYPE})
    stop_on_failure: frozenset[str] = frozenset({"ps"})
    fail_on_worker_failure: bool = False
    security_enabled: bool = True
    heartbeat_interval_ms: int = 1000
    max_missed_heartbeats: int = 5
    metrics_interval_ms: int = 5000
    gpu_metrics: bool = True
    am_cds: bool = True  # the AM JVM's class-data archive per node (tony_py/am/start_jvm.sh)
    gpu_assignment: str = "auto"  # auto: name each task's devices (am/core/gpus.py); none: leave it to the cluster
    execution_timeout_ms: int = 0
    registry_timeout_s: int = 0
    allocation_timeout_ms: int = 600_000
    registration_timeout_ms: int = 600_000
    progress_timeout_ms: int = 0
    after_chief_timeout_ms: int = 300_000
    max_failures_per_node: int = 3
    am_max_attempts: int = 2
    am_lost_timeout_s: int = 60
    lease_s: int = 10  # an executor cut off from its AM this long kills its task (executor/lease.py)
    view_acls: tuple[str, ...] = ()  # who else sees the job's detail through YARN's proxy ("*": all)
    diagnostics_include_logs: bool = False  # stderr tails and tracebacks in YARN's diagnostics too
    client_stop_wait_s: int = 15
    command: str | None = None
    container_env: dict[str, str] = field(default_factory=dict)
    execution_env: dict[str, str] = field(default_factory=dict)
    cache_visibility: str = "PRIVATE"
    # TonY's job shapes
    single_node: bool = False  # no tony.<type>.instances: the AM's container runs the command
    stages: tuple[tuple[str, ...], ...] = ()  # (prepare types, training types), or () for one stage
    groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    dependency_timeouts: tuple[DependencyTimeout, ...] = ()
    tensorboard_log_dir: str | None = None  # the sidecar TensorBoard's log dir
    horovod_test_mode: bool = False
    horovod_fast_fail: bool = False
    horovod_debug_driver: bool = False
    placement_spec: str | None = None  # application-wide constraint, registered with the RM
    docker_enabled: bool = False
    docker_am_image: str | None = None
    docker_mounts: str | None = None
    other_namenodes: tuple[str, ...] = ()
    # job history (tony.history.*; the client resolves the directories, "" = none)
    history_intermediate: str = ""
    history_finished: str = ""
    history_retention_s: int = 30 * 24 * 3600
    portal_url: str | None = None

    @property
    def scheduling_requests(self) -> bool:
        """Whether the AM asks for containers as SchedulingRequests: when any type has a placement
        spec, every type is asked for that way (YARN's CapacityScheduler ignores the
        SchedulingRequests of an allocate call that also carries plain ResourceRequests)."""
        return any(t.placement_spec for t in self.types)

    def validate(self) -> None:
        """Invariants every JobSpec holds, however it was made (build_job_spec names the
        offending config key; this guards the file the AM and executors read)."""
        if self.framework not in FRAMEWORKS or self.distributed_mode not in DISTRIBUTED_MODES:
            raise ModelError(f"framework {self.framework!r} / mode {self.distributed_mode!r} not allowed")
        if not self.types or len({t.name for t in self.types}) != len(self.types):
            raise ModelError("job types must be present and unique")
        if self.gpu_assignment not in GPU_ASSIGNMENTS:
            raise ModelError(f"gpu assignment {self.gpu_assignment!r} not allowed")
        if self.cache_visibility not in CACHE_VISIBILITIES:
            raise ModelError(f"cache visibility {self.cache_visibility!r} not allowed")
        for t in self.types:
            if not (t.command or self.command):
                raise ModelError(f"job type {t.name} has no command")
        if self.heartbeat_interval_ms < 100 or self.max_missed_heartbeats < 1 or self.am_max_attempts < 1:
            raise ModelError("heartbeat settings out of range")
        if self.lease_s * 1000 < 2 * self.heartbeat_interval_ms:
            raise ModelError("the lease must last at least two heartbeat intervals")
        names = set(self.type_names())
        staged = [t for stage in self.stages for t in stage]
        if self.stages and (sorted(staged) != sorted(names) or len(self.stages) != 2):
            raise ModelError(f"stages {self.stages} must cover every job type {sorted(names)} exactly once")
        if self.single_node and self.type_names() != [SINGLE_NODE_TYPE]:
            raise ModelError("a single-node job has exactly one task")

    # ---- derived views ---------------------------------------------------------------------
    def type(self, name: str) -> TaskType:
        for t in self.types:
            if t.name == name:
                return t
        raise KeyError(name)

    def type_names(self) -> list[str]:
        return [t.name for t in self.types]

    def tasks(self) -> list[TaskId]:
        return list(self._tasks)

    @cached_property
    def _tasks(self) -> tuple[TaskId, ...]:  # (the AM asks for every container it launches)
        return tuple(TaskId(t.name, i) for t in self.types for i in range(t.instances))

    def chief(self) -> TaskId:
        """TonY's rule: `chief:0` if there is a chief type, else `worker:0`; a ray job's is its
        head, which runs the driver."""
        names = self.type_names()
        head = traits(self.framework).chief_type
        if head in names:
            return TaskId(head, 0)
        if CHIEF_TYPE in names:
            return TaskId(CHIEF_TYPE, 0)
        if "worker" in names:
            return TaskId("worker", 0)
        return self.tasks()[0]

    def is_tracked(self, type_name: str) -> bool:
        return type_name not in self.untracked and type_name not in self.sidecar

    def tracked_tasks(self) -> list[TaskId]:
        return list(self._tracked_tasks)

    @cached_property
    def _tracked_tasks(self) -> tuple[TaskId, ...]:
        return tuple(t for t in self._tasks if self.is_tracked(t.type))

    def command_for(self, type_name: str) -> str:
        cmd = self.type(type_name).command or self.command
        assert cmd, "validated in build_job_spec"
        return cmd

    def stage_of(self, type_name: str) -> int:
        """0 for every type of a one-stage job; 0 (prepare) or 1 (training) otherwise."""
        for index, stage in enumerate(self.stages):
            if type_name in stage:
                return index
        return 0

    @property
    def last_stage(self) -> int:
        return max(len(self.stages) - 1, 0)

    def tb_port_task(self) -> TaskId:
        """Who reserves TB_PORT: the sidecar TensorBoard when there is one, else the chief."""
        if self.tensorboard_log_dir and TENSORBOARD_TYPE in self.type_names():
            return TaskId(TENSORBOARD_TYPE, 0)
        return self.chief()
