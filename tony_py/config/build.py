"""From the merged configuration to a validated JobSpec, with TonY's keys and semantics.

Every error is a ConfigError that names the key (and, via build_job_spec, the file or flag that
set it), says what was found and what is allowed; the client turns it into one line and exit
code 2, before anything is uploaded or submitted. Every key is read through values.read, so its
type, default and bounds are keytable.py's; TonY's job shapes (stages, groups, sidecar, Horovod,
Docker) are shapes.py.
"""

from __future__ import annotations

import re
import shlex

from tony_py.config.layers import TonyConf
from tony_py.config.ray_limits import RAY_HEAD_DEFAULT_MEMORY, ray_join_timeout, ray_min_memory_mb
from tony_py.config.shapes import (RAY_WORKER_TYPE, groups, horovod_types, image_of, mounts, ray_types, stages,
                                   tensorboard_type, with_dependencies, with_image)
from tony_py.config.spec import (HOROVOD_DRIVER_TYPE, RAY_HEAD_TYPE, SINGLE_NODE_TYPE, TENSORBOARD_TYPE, TYPE_NAME,
                                 TYPE_ORDER, JobSpec, Resources, TaskType)
from tony_py.config.torchrun import check_command
from tony_py.config.traits import FRAMEWORK_TRAITS, TRAINER_TYPES, traits
from tony_py.config.values import list_of, read, resources_of
from tony_py.errors import ConfigError, UsageError

# Second-level names under tony.* that are settings, not job types.
RESERVED_NAMES = frozenset(
    "application am task container containers execution history docker yarn portal keytab "
    "https http secret horovod other python gpu version executor staging".split()
)
_INSTANCES_KEY = re.compile(r"^tony\.([^.]+)\.instances$")


def _type_sort_key(name: str) -> tuple[int, str]:
    return (TYPE_ORDER.index(name) if name in TYPE_ORDER else len(TYPE_ORDER), name)


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
        if not TYPE_NAME.match(name):
            raise ConfigError(key, f"job type {name!r} is not allowed: type names are lowercase letters (a-z)")
        names.append(name)
    return sorted(names, key=_type_sort_key)


# ---- the spec ------------------------------------------------------------------------------------
def build_job_spec(conf: TonyConf, python: str = "python3") -> JobSpec:
    """The validated spec; an error names the key and the file (or flag) that set it.
    `python` runs the helpers TonY-py adds to a job (the TensorBoard sidecar, Horovod's driver)."""
    try:
        return _build_job_spec(conf, python)
    except ConfigError as exc:
        if exc.origin is None and exc.key in conf:
            raise exc.with_origin(conf.origin(exc.key)) from None
        raise


def _build_job_spec(conf: TonyConf, python: str) -> JobSpec:
    framework = read(conf, "tony.application.framework")
    mode = read(conf, "tony.application.distributed-mode")
    am = resources_of(conf, "tony.am")
    types, single_node, roles = _types(conf, framework, am, python)
    docker = read(conf, "tony.docker.enabled")
    spec = JobSpec(
        name=read(conf, "tony.application.name"),
        framework=framework,
        queue=read(conf, "tony.yarn.queue"),
        types=tuple(with_image(conf, t) for t in types) if docker else tuple(types),
        am=am,
        app_type=read(conf, "tony.application.type"),
        tags=_tags(conf),
        node_label=read(conf, "tony.application.node-label"),
        priority=read(conf, "tony.application.priority"),
        distributed_mode=mode,
        single_node=single_node,
        stages=stages(conf, [t.name for t in types]),
        groups=groups(conf),
        docker_enabled=docker,
        docker_am_image=image_of(conf, "am") if docker else None,
        docker_mounts=mounts(conf) if docker else None,
        **roles,
        **_rules(conf),
        **_timeouts(conf),
        **_environment(conf, roles["execution_env"]),
    )
    spec = with_dependencies(conf, spec)
    _check_labels_with_placement(spec)
    _check_framework(spec)
    _check_torchrun(spec, python)
    _check_ray(spec, conf, python)
    spec.validate()
    return spec


def _types(conf: TonyConf, framework: str, am: Resources, python: str) -> tuple[list[TaskType], bool, dict]:
    """The job's task types (with what TonY-py adds: the sidecar, Horovod's driver), whether it is
    a single-node job, and the roles of its types (tracked, sidecar) with the tasks' env."""
    default_command = read(conf, "tony.containers.command")
    untracked = set(read(conf, "tony.application.untracked.jobtypes"))
    sidecar = set(read(conf, "tony.application.sidecar.jobtypes"))
    execution_env = read(conf, "tony.execution.envs")
    tb_log_dir = read(conf, "tony.application.tensorboard-log-dir")
    horovod_debug = read(conf, "tony.horovod.driver.mode.debug")
    types = []

    def make(name: str, count: int) -> TaskType:
        # a Ray head's own daemons are more than TonY's 2g default for a type
        memory = RAY_HEAD_DEFAULT_MEMORY if framework == "ray" and name == RAY_HEAD_TYPE else None
        return _task_type(conf, name, count, default_command, memory)

    for name in job_type_names(conf):
        instances = read(conf, f"tony.{name}.instances")
        limit = read(conf, f"tony.{name}.max-instances")
        if 0 <= limit < instances:
            raise ConfigError(f"tony.{name}.instances", f"{instances} instances exceed tony.{name}.max-instances={limit}")
        if instances and not (name == TENSORBOARD_TYPE and tb_log_dir):  # the sidecar's count is forced to 1
            types.append(make(name, instances))
    if framework == "ray":
        types = ray_types(conf, types, make)
        untracked.add(RAY_WORKER_TYPE)  # the driver's end ends the job; the AM then stops the workers
    single_node = not types
    if single_node:
        # TonY: with no tony.<type>.instances the AM's container runs the command itself.
        command = read(conf, "tony.am.command") or default_command
        if command is None:
            raise UsageError("no command to run: pass --executes (a job without tony.<type>.instances runs it in "
                             "the AM's container)")
        types = [TaskType(SINGLE_NODE_TYPE, 1, am, command=command)]
    if tb_log_dir and not single_node:
        types.append(tensorboard_type(conf, tb_log_dir, python))
        sidecar.add(TENSORBOARD_TYPE)
        execution_env.setdefault("TB_LOG_DIR", tb_log_dir)  # every task writes its summaries there
    if framework == "horovod" and not single_node:
        types = horovod_types(conf, types, horovod_debug, python)
        untracked.add(HOROVOD_DRIVER_TYPE)
    _check_totals(conf, types)
    roles = dict(untracked=frozenset(untracked), sidecar=frozenset(sidecar), command=default_command,
                 execution_env=execution_env, tensorboard_log_dir=tb_log_dir if not single_node else None,
                 horovod_debug_driver=horovod_debug)
    return types, single_node, roles


def _rules(conf: TonyConf) -> dict:
    """When the job succeeds, fails or restarts (policy.py applies them)."""
    return dict(
        am_retry_count=read(conf, "tony.am.retry-count"),
        retryable_exit_codes=read(conf, "tony.application.retryable-exit-codes"),
        retry_on_signal=read(conf, "tony.application.retry-on-signal"),
        retry_on_infrastructure=read(conf, "tony.application.retry-on-infrastructure-failure"),
        max_infrastructure_restarts=read(conf, "tony.application.max-infrastructure-restarts"),
        stop_on_failure=frozenset(read(conf, "tony.application.stop-on-failure-jobtypes")),
        fail_on_worker_failure=read(conf, "tony.application.fail-on-worker-failure-enabled"),
        max_failures_per_node=read(conf, "tony.task.max-failures-per-node"),
        am_max_attempts=read(conf, "tony.am.max-attempts"),
        horovod_test_mode=read(conf, "tony.horovod.mode.test") or read(conf, "tony.horovod.mode.test.fast.fail"),
        horovod_fast_fail=read(conf, "tony.horovod.mode.test.fast.fail"),
        placement_spec=read(conf, "tony.application.placement-spec"),
    )


def _timeouts(conf: TonyConf) -> dict:
    """Heartbeats, leases and every timeout (the watchdog's and the executor's)."""
    return dict(
        timeout_ms=read(conf, "tony.application.timeout"),
        startup_timeout_ms=read(conf, "tony.am.startup-timeout"),
        heartbeat_interval_ms=read(conf, "tony.task.heartbeat-interval-ms"),
        max_missed_heartbeats=read(conf, "tony.task.max-missed-heartbeats"),
        metrics_interval_ms=read(conf, "tony.task.metrics-interval-ms"),
        execution_timeout_ms=read(conf, "tony.task.executor.execution-timeout-ms"),
        registry_timeout_s=read(conf, "tony.task.executor.registry-timeout-sec"),
        allocation_timeout_ms=read(conf, "tony.container.allocation.timeout"),
        registration_timeout_ms=read(conf, "tony.container.registration.timeout"),
        progress_timeout_ms=read(conf, "tony.task.progress-timeout-ms"),
        after_chief_timeout_ms=read(conf, "tony.application.after-chief-timeout-ms"),
        am_lost_timeout_s=read(conf, "tony.task.executor.am-lost-timeout-sec"),
        lease_s=_lease_s(conf),
        client_stop_wait_s=read(conf, "tony.am.wait-client-signal-stop-timeout-sec"),
    )


def _lease_s(conf: TonyConf) -> int:
    lease = read(conf, "tony.task.executor.lease-sec")
    interval_ms = read(conf, "tony.task.heartbeat-interval-ms")
    if lease * 1000 < 2 * interval_ms:
        raise ConfigError("tony.task.executor.lease-sec", f"{lease} s is less than two heartbeat intervals "
                                                          f"(tony.task.heartbeat-interval-ms={interval_ms})")
    return lease


def _environment(conf: TonyConf, execution_env: dict) -> dict:
    """What the containers get besides their command: env, GPUs, caches, history, file systems."""
    return dict(
        security_enabled=read(conf, "tony.application.security.enabled"),
        gpu_metrics=read(conf, "tony.task.gpu-metrics.enabled"),
        am_cds=read(conf, "tony.am.class-data-sharing"),
        gpu_assignment=read(conf, "tony.gpu.assignment"),
        container_env=read(conf, "tony.containers.envs"),
        cache_visibility=read(conf, "tony.staging.cache-visibility"),
        other_namenodes=read(conf, "tony.other.namenodes"),
        view_acls=read(conf, "tony.application.view-acls"),
        diagnostics_include_logs=read(conf, "tony.application.diagnostics.include-logs"),
        history_retention_s=read(conf, "tony.history.retention-sec"),
        portal_url=_portal_url(conf),
    )


def _task_type(conf: TonyConf, name: str, instances: int, default_command: str | None,
               memory_default: str | None = None) -> TaskType:
    command = read(conf, f"tony.{name}.command")
    if command is None and default_command is None:
        raise UsageError(f"no command for job type {name!r}: pass --executes (or set tony.{name}.command)")
    placement = read(conf, f"tony.{name}.placement-spec") or read(conf, "tony.containers.placement-spec")
    label = read(conf, f"tony.{name}.node-label")
    if placement and label:
        raise ConfigError(f"tony.{name}.node-label", "cannot be combined with a placement spec: YARN places "
                                                     "scheduling requests by their constraint alone")
    tags = read(conf, f"tony.{name}.allocation-tags") or read(conf, "tony.containers.allocation-tags")
    fewest = read(conf, f"tony.{name}.min-instances", instances, maximum=instances)
    memory = {} if memory_default is None else {"memory": memory_default}
    return TaskType(name, instances, resources_of(conf, f"tony.{name}", **memory), label, command,
                    placement_spec=placement, allocation_tags=tags or ((name,) if placement else ()),
                    min_instances=fewest if fewest < instances else None,
                    nproc_per_node=read(conf, f"tony.{name}.nproc-per-node"))


def _check_labels_with_placement(spec: JobSpec) -> None:
    """A job with a placement spec asks for every type by constraint alone (JobSpec.scheduling_requests),
    so no type of it can also be placed by a node label."""
    if not spec.scheduling_requests:
        return
    placed = next(t.name for t in spec.types if t.placement_spec)
    for t in spec.types:
        if t.node_label:
            raise ConfigError(f"tony.{t.name}.node-label", f"cannot be used in a job with a placement spec "
                              f"(tony.{placed}.placement-spec): YARN places such a job's containers by "
                              "constraint alone")
    if spec.node_label:
        raise ConfigError("tony.application.node-label", f"cannot be used in a job with a placement spec "
                          f"(tony.{placed}.placement-spec): YARN places such a job's containers by constraint alone")


def _tags(conf: TonyConf) -> tuple[str, ...]:
    """tony.application.tags, plus Hadoop's mapreduce.job.tags (how `hadoop jar` users and
    Dataproc tag jobs: Dataproc links its job to the application by its dataproc_job_<id> tag).
    YARN lower-cases tags and takes at most 10 of at most 100 ASCII characters."""
    tags: list[str] = []
    for key, listed in (("tony.application.tags", read(conf, "tony.application.tags")),
                        ("mapreduce.job.tags", list_of(conf, "mapreduce.job.tags"))):  # Hadoop's key
        for tag in listed:
            if len(tag) > 100 or not tag.isascii() or not tag.isprintable():
                raise ConfigError(key, f"{tag[:40]!r}: a YARN tag is at most 100 printable ASCII characters")
            if tag.lower() not in tags:
                tags.append(tag.lower())
    if len(tags) > 9:  # and TonY-py adds its own
        raise ConfigError("tony.application.tags", f"{len(tags)} tags; YARN takes at most 10, one is tony-py's")
    return tuple(tags)


def _portal_url(conf: TonyConf) -> str | None:
    """tony.portal.url: where `tony portal` serves this cluster's history (TonY's default,
    https://localhost:19886, means none was set up)."""
    url = read(conf, "tony.portal.url")
    if url is None or conf.origin("tony.portal.url") == "defaults":
        return None
    if not re.match(r"^https?://[^\s]+$", url):
        raise ConfigError("tony.portal.url", f"{url!r} is not an http(s) URL")
    return url.rstrip("/")


def _check_totals(conf: TonyConf, types: list[TaskType]) -> None:
    total = sum(t.instances for t in types)
    max_total = read(conf, "tony.task.max-total-instances")
    if 0 <= max_total < total:
        raise ConfigError("tony.task.max-total-instances", f"the job has {total} tasks, more than {max_total}")
    total_gpus = sum(t.instances * t.resources.gpus for t in types)
    max_gpus = read(conf, "tony.task.max-total-gpus")
    if 0 <= max_gpus < total_gpus:
        raise ConfigError("tony.task.max-total-gpus", f"the job asks for {total_gpus} GPUs, more than {max_gpus}")


def _with(trait: str) -> str:
    return ", ".join(name for name, t in FRAMEWORK_TRAITS.items() if getattr(t, trait))


def _check_framework(spec: JobSpec) -> None:
    """What the framework asks of the job (config/traits.py)."""
    names = set(spec.type_names())
    wants = traits(spec.framework)
    if wants.single_task and len(spec.tasks()) != 1:
        raise ConfigError("tony.application.framework",
                          f"{spec.framework} runs exactly one task, but the job has {len(spec.tasks())} "
                          f"({', '.join(f'tony.{t.name}.instances={t.instances}' for t in spec.types)})")
    if spec.single_node:
        return
    if wants.ranked and not (set(TRAINER_TYPES) & names):
        raise ConfigError("tony.worker.instances",
                          f"{spec.framework} needs trainer tasks: set tony.worker.instances > 0")
    shrinking = [t for t in spec.types if t.min_instances is not None]
    if shrinking and not wants.elastic:
        raise ConfigError(f"tony.{shrinking[0].name}.min-instances",
                          f"a {spec.framework} job cannot shrink (its tasks' environment is not only a function of "
                          f"who runs); min-instances works with {_with('elastic')}")
    for t in shrinking:
        if spec.stages and spec.stage_of(t.name) < spec.last_stage:
            raise ConfigError(f"tony.{t.name}.min-instances", "only for types of the training stage: the "
                              "prepare stage must finish whole before the training stage starts")
        if t.name in spec.sidecar:
            raise ConfigError(f"tony.{t.name}.min-instances", "not for a sidecar type")
    if shrinking and spec.allocation_timeout_ms < 0:
        raise ConfigError(f"tony.{shrinking[0].name}.min-instances",
                          "needs tony.container.allocation.timeout >= 0: a gang shrinks when that timeout runs out")
    if shrinking and spec.distributed_mode != "GANG":
        raise ConfigError(f"tony.{shrinking[0].name}.min-instances",
                          "needs tony.application.distributed-mode=GANG: a resize regenerates every task's ranks")
    if wants.gang_only and spec.distributed_mode != "GANG":
        raise ConfigError("tony.application.distributed-mode", f"{spec.framework} needs GANG: {wants.gang_only}")
    one = wants.needs_one
    if one and (one not in names or spec.type(one).instances != 1):
        raise ConfigError(f"tony.{one}.instances", f"{spec.framework} needs exactly one {one} task "
                                                   f"(tony.{one}.instances=1)")
    if not spec.tracked_tasks():
        raise ConfigError("tony.application.untracked.jobtypes",
                          "every job type is untracked, so the job could never finish; track at least one")


def _check_ray(spec: JobSpec, conf: TonyConf, python: str) -> None:
    """A ray task runs a Ray node with the command's own interpreter (frameworks/ray.py), so
    the head's command must start with it."""
    if spec.framework != "ray":
        return
    key = "tony.head.command" if read(conf, "tony.head.command") else "tony.containers.command"
    try:
        check_command(spec.command_for("head"), (shlex.split(python) or [None])[0])
    except ValueError as exc:
        raise ConfigError(key, f"a ray job's driver {str(exc).replace('torchrun runs', 'Ray runs')}") from None
    for stage_key in ("tony.application.prepare-stage", "tony.application.training-stage"):
        if read(conf, stage_key):  # the workers of a later stage would never join the head
            raise ConfigError(stage_key, "a ray job has no stages: its head and workers start together")
    try:
        ray_join_timeout(spec.execution_env.get("TONY_RAY_JOIN_TIMEOUT_S"))
    except ValueError as exc:
        raise ConfigError("tony.execution.envs", str(exc)) from None
    for t in spec.types:
        need = ray_min_memory_mb(t.name)
        if t.resources.memory_mb < need:
            raise ConfigError(f"tony.{t.name}.memory", f"{t.resources.memory_mb} MB is too small for a Ray "
                              f"{t.name} node: at least {need} MB (Ray's own processes, its smallest object "
                              "store and room for one task)")


def _check_torchrun(spec: JobSpec, python: str) -> None:
    """tony.<type>.nproc-per-node > 1 runs each task of the type under torchrun: PyTorch's
    trainer types only, in GANG mode, with a command torchrun can run, and GPUs that split
    evenly between the task's processes."""
    wrapped = [t for t in spec.types if t.nproc_per_node > 1]
    for t in wrapped:
        key = f"tony.{t.name}.nproc-per-node"
        if not traits(spec.framework).torchrun:
            raise ConfigError(key, f"{t.nproc_per_node} processes per task run under torchrun, which needs "
                                   f"tony.application.framework={_with('torchrun')} (not {spec.framework}); "
                                   "allowed here: 1")
        if t.name not in TRAINER_TYPES:
            raise ConfigError(key, f"only trainer types ({', '.join(TRAINER_TYPES)}) run under torchrun; "
                                   f"a {t.name} task runs one process: allowed here: 1")
        if t.resources.gpus % t.nproc_per_node:
            raise ConfigError(f"tony.{t.name}.gpus", f"{t.resources.gpus} GPU(s) do not split evenly between "
                                                     f"{key}={t.nproc_per_node} processes (each takes "
                                                     "cuda:LOCAL_RANK): use 0 or a multiple of it")
        try:
            check_command(spec.command_for(t.name), (shlex.split(python) or [None])[0])
        except ValueError as exc:
            raise ConfigError(key, f"torchrun {exc}") from None
    if not wrapped:
        return
    if spec.distributed_mode != "GANG":
        raise ConfigError("tony.application.distributed-mode", f"tony.{wrapped[0].name}.nproc-per-node="
                          f"{wrapped[0].nproc_per_node} needs GANG: every task joins one torchrun rendezvous")
    # Every trainer type the same count: torch would accept different counts per task, but a
    # trainer left at 1 would not run under torchrun at all (it could not join the rendezvous),
    # and one count keeps LOCAL_WORLD_SIZE the same everywhere and WORLD_SIZE = tasks × count.
    trainers = [t for t in spec.types if t.name in TRAINER_TYPES]
    for t in trainers:
        if t.nproc_per_node != wrapped[0].nproc_per_node:
            raise ConfigError(f"tony.{t.name}.nproc-per-node", f"is {t.nproc_per_node}, but tony.{wrapped[0].name}."
                              f"nproc-per-node is {wrapped[0].nproc_per_node}: every trainer type "
                              f"({', '.join(t.name for t in trainers)}) runs under torchrun with the same count")
