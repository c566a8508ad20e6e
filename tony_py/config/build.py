"""From the merged configuration to a validated JobSpec, with TonY's keys and semantics.

Every error is a ConfigError that names the key (and, via build_job_spec, the file or flag that
set it), says what was found and what is allowed; the client turns it into one line and exit
code 2, before anything is uploaded or submitted.
"""

from __future__ import annotations

import dataclasses
import math
import re

from tony_py.config import checks
from tony_py.config.layers import TonyConf
from tony_py.config.spec import (CACHE_VISIBILITIES, GPU_ASSIGNMENTS, DISTRIBUTED_MODES, FRAMEWORKS, HOROVOD_DRIVER_TYPE,
                                 MAX_INSTANCES, SINGLE_NODE_TYPE, TENSORBOARD_TYPE, TYPE_NAME, TYPE_ORDER,
                                 DependencyTimeout, JobSpec, Resources, TaskType)
from tony_py.errors import ConfigError, UsageError

# Second-level names under tony.* that are settings, not job types.
RESERVED_NAMES = frozenset(
    "application am task container containers execution history docker yarn portal keytab "
    "https http secret horovod other python gpu version executor staging".split()
)
_INSTANCES_KEY = re.compile(r"^tony\.([^.]+)\.instances$")
_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)b?$", re.IGNORECASE)
_MEMORY_UNIT_MB = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
_BOOL = {"true": True, "false": False}
_GROUP_KEY = re.compile(r"^tony\.application\.group\.([A-Za-z]+)$")
_DEPENDENCY_KEY = re.compile(r"^tony\.application\.dependency\.([A-Za-z]+)\.timeout\.after\.([A-Za-z]+)$")
# Docker image references (registry/name:tag@digest), as `docker pull` takes them.
_IMAGE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$")
_MOUNT_MODES = ("ro", "rw")
TRAINER_TYPES = ("chief", "master", "worker")
SIDECAR_MODULE = "tony_py.sidecar"
HOROVOD_DRIVER_MODULE = "tony_py.frameworks.horovod_driver"


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


def _text(conf: TonyConf, key: str) -> str | None:
    return (conf.get(key) or "").strip() or None


def _int_set(conf: TonyConf, key: str) -> frozenset[int]:
    out = set()
    for item in _list(conf, key):
        try:
            out.add(int(item))
        except ValueError:
            raise ConfigError(key, f"must be a comma-separated list of exit codes, got {item!r}") from None
    return frozenset(out)


def _choice(conf: TonyConf, key: str, allowed: tuple[str, ...], default: str) -> str:
    raw = (conf.get(key) or "").strip()
    if not raw:
        return default
    match = next((a for a in allowed if a.lower() == raw.lower()), None)
    if match is None:
        raise ConfigError(key, f"must be one of {', '.join(allowed)}, got {raw!r}")
    return match


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


def _resources(conf: TonyConf, prefix: str, memory: str = "2g", vcores: int = 1) -> Resources:
    return Resources(
        memory_mb=parse_memory_mb(conf.get(f"{prefix}.memory", memory), f"{prefix}.memory"),
        vcores=_int(conf, f"{prefix}.vcores", vcores, minimum=1),
        gpus=_int(conf, f"{prefix}.gpus", 0, minimum=0),
    )


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
    framework = (conf.get("tony.application.framework") or "tensorflow").strip().lower()
    if framework not in FRAMEWORKS:
        raise ConfigError("tony.application.framework",
                          f"unknown framework {conf.get('tony.application.framework')!r}; allowed: {', '.join(FRAMEWORKS)}")
    mode = (conf.get("tony.application.distributed-mode") or "GANG").strip().upper()
    if mode not in DISTRIBUTED_MODES:
        raise ConfigError("tony.application.distributed-mode",
                          f"must be one of {', '.join(DISTRIBUTED_MODES)}, got {conf.get('tony.application.distributed-mode')!r}")
    default_command = _text(conf, "tony.containers.command")
    untracked = set(_list(conf, "tony.application.untracked.jobtypes", "ps"))
    sidecar = set(_list(conf, "tony.application.sidecar.jobtypes", TENSORBOARD_TYPE))
    execution_env = parse_env_list(conf.get("tony.execution.envs"), "tony.execution.envs")
    tb_log_dir = _text(conf, "tony.application.tensorboard-log-dir")
    horovod_debug = _bool(conf, "tony.horovod.driver.mode.debug", False)
    am = _resources(conf, "tony.am")

    types = []
    for name in job_type_names(conf):
        instances = _int(conf, f"tony.{name}.instances", 0, minimum=0, maximum=MAX_INSTANCES)
        limit = _int(conf, f"tony.{name}.max-instances", -1)
        if 0 <= limit < instances:
            raise ConfigError(f"tony.{name}.instances", f"{instances} instances exceed tony.{name}.max-instances={limit}")
        if instances and not (name == TENSORBOARD_TYPE and tb_log_dir):  # the sidecar's count is forced to 1
            types.append(_task_type(conf, name, instances, default_command))
    single_node = not types
    if single_node:
        # TonY: with no tony.<type>.instances the AM's container runs the command itself.
        command = _text(conf, "tony.am.command") or default_command
        if command is None:
            raise UsageError("no command to run: pass --executes (a job without tony.<type>.instances runs it in "
                             "the AM's container)")
        types = [TaskType(SINGLE_NODE_TYPE, 1, am, command=command)]
    if tb_log_dir and not single_node:
        types.append(_tensorboard_type(conf, tb_log_dir, python))
        sidecar.add(TENSORBOARD_TYPE)
        execution_env.setdefault("TB_LOG_DIR", tb_log_dir)  # every task writes its summaries there
    if framework == "horovod" and not single_node:
        types = _horovod_types(conf, types, horovod_debug, python)
        untracked.add(HOROVOD_DRIVER_TYPE)
    _check_totals(conf, types)
    stages = _stages(conf, [t.name for t in types])
    docker = _bool(conf, "tony.docker.enabled", False)
    if docker:
        types = [_with_image(conf, t) for t in types]

    spec = JobSpec(
        name=conf.get("tony.application.name") or "TonyApplication",
        framework=framework,
        queue=(conf.get("tony.yarn.queue") or "default").strip(),
        types=tuple(types),
        am=am,
        app_type=(conf.get("tony.application.type") or "TONY").strip(),
        tags=_tags(conf),
        node_label=_text(conf, "tony.application.node-label"),
        priority=_int(conf, "tony.application.priority", 0, minimum=0),
        distributed_mode=mode,
        timeout_ms=_int(conf, "tony.application.timeout", 0, minimum=0),
        startup_timeout_ms=_int(conf, "tony.am.startup-timeout", 0, minimum=0),
        am_retry_count=_int(conf, "tony.am.retry-count", 0, minimum=0),
        retryable_exit_codes=_int_set(conf, "tony.application.retryable-exit-codes"),
        retry_on_signal=_bool(conf, "tony.application.retry-on-signal", True),
        retry_on_infrastructure=_bool(conf, "tony.application.retry-on-infrastructure-failure", True),
        untracked=frozenset(untracked),
        sidecar=frozenset(sidecar),
        stop_on_failure=frozenset(_list(conf, "tony.application.stop-on-failure-jobtypes", "ps")),
        fail_on_worker_failure=_bool(conf, "tony.application.fail-on-worker-failure-enabled", False),
        security_enabled=_bool(conf, "tony.application.security.enabled", True),
        heartbeat_interval_ms=_int(conf, "tony.task.heartbeat-interval-ms", 1000, minimum=100),
        max_missed_heartbeats=_int(conf, "tony.task.max-missed-heartbeats", 5, minimum=1),
        metrics_interval_ms=_int(conf, "tony.task.metrics-interval-ms", 5000, minimum=100),
        gpu_metrics=_bool(conf, "tony.task.gpu-metrics.enabled", True),
        gpu_assignment=_choice(conf, "tony.gpu.assignment", GPU_ASSIGNMENTS, "auto"),
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
        execution_env=execution_env,
        cache_visibility=_choice(conf, "tony.staging.cache-visibility", CACHE_VISIBILITIES, "PRIVATE"),
        single_node=single_node,
        stages=stages,
        groups=_groups(conf),
        dependency_timeouts=(),
        tensorboard_log_dir=tb_log_dir if not single_node else None,
        horovod_test_mode=_bool(conf, "tony.horovod.mode.test", False) or _bool(conf, "tony.horovod.mode.test.fast.fail", False),
        horovod_fast_fail=_bool(conf, "tony.horovod.mode.test.fast.fail", False),
        horovod_debug_driver=horovod_debug,
        placement_spec=_text(conf, "tony.application.placement-spec"),
        docker_enabled=docker,
        docker_am_image=_image(conf, "am") if docker else None,
        docker_mounts=_mounts(conf) if docker else None,
        other_namenodes=_list(conf, "tony.other.namenodes"),
        history_retention_s=_int(conf, "tony.history.retention-sec", 30 * 24 * 3600, minimum=0),
        portal_url=_portal_url(conf),
    )
    spec = _with_dependencies(conf, spec)
    _check_labels_with_placement(spec)
    _check_framework(spec)
    spec.validate()
    return spec


def _task_type(conf: TonyConf, name: str, instances: int, default_command: str | None) -> TaskType:
    command = _text(conf, f"tony.{name}.command")
    if command is None and default_command is None:
        raise UsageError(f"no command for job type {name!r}: pass --executes (or set tony.{name}.command)")
    placement = _text(conf, f"tony.{name}.placement-spec") or _text(conf, "tony.containers.placement-spec")
    label = _text(conf, f"tony.{name}.node-label")
    if placement and label:
        raise ConfigError(f"tony.{name}.node-label", "cannot be combined with a placement spec: YARN places "
                                                     "scheduling requests by their constraint alone")
    tags = _list(conf, f"tony.{name}.allocation-tags") or _list(conf, "tony.containers.allocation-tags")
    return TaskType(name, instances, _resources(conf, f"tony.{name}"), label, command,
                    placement_spec=placement, allocation_tags=tags or ((name,) if placement else ()))


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
    for key in ("tony.application.tags", "mapreduce.job.tags"):
        for tag in _list(conf, key):
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
    url = _text(conf, "tony.portal.url")
    if url is None or conf.origin("tony.portal.url") == "defaults":
        return None
    if not re.match(r"^https?://[^\s]+$", url):
        raise ConfigError("tony.portal.url", f"{url!r} is not an http(s) URL")
    return url.rstrip("/")


def _check_totals(conf: TonyConf, types: list[TaskType]) -> None:
    total = sum(t.instances for t in types)
    max_total = _int(conf, "tony.task.max-total-instances", -1)
    if 0 <= max_total < total:
        raise ConfigError("tony.task.max-total-instances", f"the job has {total} tasks, more than {max_total}")
    total_gpus = sum(t.instances * t.resources.gpus for t in types)
    max_gpus = _int(conf, "tony.task.max-total-gpus", -1)
    if 0 <= max_gpus < total_gpus:
        raise ConfigError("tony.task.max-total-gpus", f"the job asks for {total_gpus} GPUs, more than {max_gpus}")


# ---- TonY's job shapes ------------------------------------------------------------------------------
def _stages(conf: TonyConf, names: list[str]) -> tuple[tuple[str, ...], ...]:
    """tony.application.prepare-stage / training-stage: prepare types run to completion first.
    As in TonY, a stage left empty gets every type the other does not list; unlike TonY (which
    only compared counts), every name must be a job type and no type may be in both."""
    keys = ("tony.application.prepare-stage", "tony.application.training-stage")
    prepare, training = (list(_list(conf, k)) for k in keys)
    if not prepare and not training:
        return ()
    for key, listed in zip(keys, (prepare, training)):
        for name in listed:
            if name not in names:
                raise ConfigError(key, f"{name!r} is not a job type of this job ({', '.join(names)})")
    both = sorted(set(prepare) & set(training))
    if both:
        raise ConfigError(keys[1], f"{both[0]!r} is in both stages")
    added = {TENSORBOARD_TYPE, HOROVOD_DRIVER_TYPE} - set(prepare) - set(training)
    prepare = prepare or [n for n in names if n not in training and n not in added]
    training = training or [n for n in names if n not in prepare]
    training += [n for n in names if n in added and n not in prepare and n not in training]
    missing = [n for n in names if n not in prepare and n not in training]
    if missing:
        raise ConfigError(keys[1], f"the stages together must cover every job type; {', '.join(missing)} is in neither")
    if not prepare or not training:
        return ()  # everything in one stage: nothing to wait for
    order = {n: i for i, n in enumerate(names)}
    return (tuple(sorted(prepare, key=order.get)), tuple(sorted(training, key=order.get)))


def _groups(conf: TonyConf) -> dict[str, tuple[str, ...]]:
    groups = {}
    for key in conf.keys():
        m = _GROUP_KEY.match(key)
        if m:
            members = _list(conf, key)
            bad = [t for t in members if not TYPE_NAME.match(t)]
            if bad or not members:
                raise ConfigError(key, f"expected a comma-separated list of job types, got {conf.get(key)!r}")
            groups[m.group(1)] = members
    return groups


def _with_dependencies(conf: TonyConf, spec: JobSpec) -> JobSpec:
    """tony.application.dependency.<type>.timeout.after.<group>=<seconds>[, .ignored=true]."""
    timeouts = []
    for key in conf.keys():
        m = _DEPENDENCY_KEY.match(key)
        if not m:
            continue
        type_name, group = m.group(1), m.group(2)
        if group not in spec.groups:
            raise ConfigError(key, f"no group {group!r}: define tony.application.group.{group}=<type>,<type>")
        timeouts.append(DependencyTimeout(type_name, group, _int(conf, key, 0, minimum=0),
                                          _bool(conf, key + ".ignored", False)))
    return dataclasses.replace(spec, dependency_timeouts=tuple(sorted(timeouts, key=lambda t: (t.type, t.group))))


def _tensorboard_type(conf: TonyConf, log_dir: str, python: str) -> TaskType:
    """TonY's sidecar: one `tensorboard` task (2 vcores, 2g by default), untracked, that serves
    the log dir on TB_PORT."""
    if not re.match(r"^([a-z][a-z0-9+.-]*://[^\s]*|/[^\s]*)$", log_dir):
        raise ConfigError("tony.application.tensorboard-log-dir",
                          f"{log_dir!r}: expected an absolute path or a URI such as hdfs:///user/me/logs")
    command = _text(conf, "tony.tensorboard.command") or f"{python} -m {SIDECAR_MODULE}"
    return TaskType(TENSORBOARD_TYPE, 1, _resources(conf, "tony.tensorboard", memory="2g", vcores=2),
                    _text(conf, "tony.tensorboard.node-label"), command)


def _horovod_types(conf: TonyConf, types: list[TaskType], debug: bool, python: str) -> list[TaskType]:
    """TonY's Horovod contract: a `driver` task runs Horovod's rendezvous server; the user's
    tony.driver.* keys are refused unless the debug mode runs the user's own driver."""
    names = [t.name for t in types]
    if "worker" not in names:
        raise ConfigError("tony.worker.instances", "horovod needs worker tasks: set tony.worker.instances > 0")
    if debug:
        if HOROVOD_DRIVER_TYPE not in names or not _text(conf, "tony.driver.command"):
            raise ConfigError("tony.driver.command", "tony.horovod.driver.mode.debug=true runs your own driver: set "
                                                     "tony.driver.instances=1 and tony.driver.command")
        return types
    own = sorted(k for k in conf.keys() if k.startswith("tony.driver.") and conf.origin(k) != "defaults")
    if own:
        raise ConfigError(own[0], "not allowed with tony.application.framework=horovod: TonY-py runs the Horovod "
                                  "driver itself (set tony.horovod.driver.mode.debug=true to run your own)")
    driver = TaskType(HOROVOD_DRIVER_TYPE, 1, Resources(2048, 1), command=f"{python} -m {HOROVOD_DRIVER_MODULE}")
    return types + [driver]


def _image(conf: TonyConf, type_name: str) -> str:
    key = f"tony.docker.{type_name}.image"
    image = _text(conf, key) or _text(conf, "tony.docker.containers.image")
    if image is None:
        raise ConfigError("tony.docker.containers.image", f"tony.docker.enabled=true but no image is set for "
                                                          f"{type_name} (set it, or {key})")
    used = key if _text(conf, key) else "tony.docker.containers.image"
    if len(image) > 255 or not _IMAGE.match(image):
        raise ConfigError(used, f"{image!r} is not a Docker image reference (e.g. registry:5000/team/image:tag)")
    return checks.launch_value(used, image, what="image")


def _with_image(conf: TonyConf, task_type: TaskType) -> TaskType:
    return dataclasses.replace(task_type, docker_image=_image(conf, task_type.name))


def _mounts(conf: TonyConf) -> str | None:
    """YARN's Docker mount list: `source:destination:mode,…`, mode ro or rw, absolute paths."""
    key = "tony.docker.containers.mount"
    raw = _text(conf, key)
    if raw is None:
        return None
    for entry in raw.split(","):
        parts = entry.strip().split(":")
        if len(parts) != 3 or not all(p.startswith("/") for p in parts[:2]) or parts[2] not in _MOUNT_MODES:
            raise ConfigError(key, f"bad mount {entry.strip()!r}: expected /source:/destination:ro or …:rw")
    return checks.launch_value(key, ",".join(e.strip() for e in raw.split(",")), what="mount list")


def _check_framework(spec: JobSpec) -> None:
    names = set(spec.type_names())
    if spec.framework == "standalone" and len(spec.tasks()) != 1:
        raise ConfigError("tony.application.framework",
                          f"standalone runs exactly one task, but the job has {len(spec.tasks())} "
                          f"({', '.join(f'tony.{t.name}.instances={t.instances}' for t in spec.types)})")
    if spec.single_node:
        return
    if spec.framework == "pytorch" and not (set(TRAINER_TYPES) & names):
        raise ConfigError("tony.worker.instances", "pytorch needs trainer tasks: set tony.worker.instances > 0")
    if spec.framework == "horovod" and spec.distributed_mode != "GANG":
        raise ConfigError("tony.application.distributed-mode", "horovod needs GANG: its workers start together")
    if spec.framework == "mxnet" and ("scheduler" not in names or spec.type("scheduler").instances != 1):
        raise ConfigError("tony.scheduler.instances", "mxnet needs exactly one scheduler task "
                                                      "(tony.scheduler.instances=1), plus servers and workers")
    if not spec.tracked_tasks():
        raise ConfigError("tony.application.untracked.jobtypes",
                          "every job type is untracked, so the job could never finish; track at least one")
