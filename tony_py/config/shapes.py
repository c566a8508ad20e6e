"""TonY's job shapes, from the configuration: stages, groups and their dependency timeouts, the
sidecar TensorBoard, Horovod's driver, and Docker images and mounts."""

from __future__ import annotations

import dataclasses
import re

from tony_py.config import checks
from tony_py.config.layers import TonyConf
from tony_py.config.ray_limits import RAY_WORKER_TYPE
from tony_py.config.spec import (HOROVOD_DRIVER_TYPE, RAY_HEAD_TYPE, TENSORBOARD_TYPE, TYPE_NAME, DependencyTimeout,
                                 JobSpec, Resources, TaskType)
from tony_py.config.values import read, resources_of
from tony_py.errors import ConfigError

_GROUP_KEY = re.compile(r"^tony\.application\.group\.([A-Za-z]+)$")
_DEPENDENCY_KEY = re.compile(r"^tony\.application\.dependency\.([A-Za-z]+)\.timeout\.after\.([A-Za-z]+)$")
# Docker image references (registry/name:tag@digest), as `docker pull` takes them.
_IMAGE = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*(?::[0-9]+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?$")
_MOUNT_MODES = ("ro", "rw")
SIDECAR_MODULE = "tony_py.sidecar"
HOROVOD_DRIVER_MODULE = "tony_py.frameworks.horovod_driver"


def stages(conf: TonyConf, names: list[str]) -> tuple[tuple[str, ...], ...]:
    """tony.application.prepare-stage / training-stage: prepare types run to completion first.
    As in TonY, a stage left empty gets every type the other does not list; unlike TonY (which
    only compared counts), every name must be a job type and no type may be in both."""
    keys = ("tony.application.prepare-stage", "tony.application.training-stage")
    prepare, training = (list(read(conf, k)) for k in keys)
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


def groups(conf: TonyConf) -> dict[str, tuple[str, ...]]:
    groups = {}
    for key in conf.keys():
        m = _GROUP_KEY.match(key)
        if m:
            members = read(conf, key)
            bad = [t for t in members if not TYPE_NAME.match(t)]
            if bad or not members:
                raise ConfigError(key, f"expected a comma-separated list of job types, got {conf.get(key)!r}")
            groups[m.group(1)] = members
    return groups


def with_dependencies(conf: TonyConf, spec: JobSpec) -> JobSpec:
    """tony.application.dependency.<type>.timeout.after.<group>=<seconds>[, .ignored=true]."""
    timeouts = []
    for key in conf.keys():
        m = _DEPENDENCY_KEY.match(key)
        if not m:
            continue
        type_name, group = m.group(1), m.group(2)
        if group not in spec.groups:
            raise ConfigError(key, f"no group {group!r}: define tony.application.group.{group}=<type>,<type>")
        timeouts.append(DependencyTimeout(type_name, group, read(conf, key), read(conf, key + ".ignored")))
    return dataclasses.replace(spec, dependency_timeouts=tuple(sorted(timeouts, key=lambda t: (t.type, t.group))))


def tensorboard_type(conf: TonyConf, log_dir: str, python: str) -> TaskType:
    """TonY's sidecar: one `tensorboard` task (2 vcores, 2g by default), untracked, that serves
    the log dir on TB_PORT."""
    if not re.match(r"^([a-z][a-z0-9+.-]*://[^\s]*|/[^\s]*)$", log_dir):
        raise ConfigError("tony.application.tensorboard-log-dir",
                          f"{log_dir!r}: expected an absolute path or a URI such as hdfs:///user/me/logs")
    command = read(conf, "tony.tensorboard.command") or f"{python} -m {SIDECAR_MODULE}"
    return TaskType(TENSORBOARD_TYPE, 1, resources_of(conf, "tony.tensorboard", vcores=2),
                    read(conf, "tony.tensorboard.node-label"), command)


def horovod_types(conf: TonyConf, types: list[TaskType], debug: bool, python: str) -> list[TaskType]:
    """TonY's Horovod contract: a `driver` task runs Horovod's rendezvous server; the user's
    tony.driver.* keys are refused unless the debug mode runs the user's own driver."""
    names = [t.name for t in types]
    if "worker" not in names:
        raise ConfigError("tony.worker.instances", "horovod needs worker tasks: set tony.worker.instances > 0")
    if debug:
        if HOROVOD_DRIVER_TYPE not in names or not read(conf, "tony.driver.command"):
            raise ConfigError("tony.driver.command", "tony.horovod.driver.mode.debug=true runs your own driver: set "
                                                     "tony.driver.instances=1 and tony.driver.command")
        return types
    own = sorted(k for k in conf.keys() if k.startswith("tony.driver.") and conf.origin(k) != "defaults")
    if own:
        raise ConfigError(own[0], "not allowed with tony.application.framework=horovod: TonY-py runs the Horovod "
                                  "driver itself (set tony.horovod.driver.mode.debug=true to run your own)")
    driver = TaskType(HOROVOD_DRIVER_TYPE, 1, Resources(2048, 1), command=f"{python} -m {HOROVOD_DRIVER_MODULE}")
    return types + [driver]


RAY_WORKER_TYPE = "worker"
def ray_types(conf: TonyConf, types: list[TaskType], make_type) -> list[TaskType]:
    """A ray job: one `head` task (added when tony.head.instances is not set; tony.head.* size
    it), which runs Ray's head node and the command as the driver, and `worker` tasks, which
    run Ray worker nodes and nothing of their own. make_type(name, instances) builds a type
    from its tony.<type>.* keys."""
    names = [t.name for t in types]
    for t in types:
        if t.name not in (RAY_HEAD_TYPE, RAY_WORKER_TYPE):
            raise ConfigError(f"tony.{t.name}.instances", f"a ray job has a head and workers only; set "
                                                          f"tony.worker.instances for Ray's worker nodes, not {t.name}")
    if RAY_HEAD_TYPE in names and types[names.index(RAY_HEAD_TYPE)].instances != 1:
        raise ConfigError("tony.head.instances", "a ray job has exactly one head (allowed: 1)")
    if RAY_WORKER_TYPE in names and read(conf, "tony.worker.command"):
        raise ConfigError("tony.worker.command", "a ray worker task runs Ray's worker node, not a command of its "
                                                 "own; the driver (--executes) runs on the head")
    if RAY_HEAD_TYPE not in names:
        types = [make_type(RAY_HEAD_TYPE, 1), *types]
    return sorted(types, key=lambda t: t.name != RAY_HEAD_TYPE)


def image_of(conf: TonyConf, type_name: str) -> str:
    key = f"tony.docker.{type_name}.image"
    image = read(conf, key) or read(conf, "tony.docker.containers.image")
    if image is None:
        raise ConfigError("tony.docker.containers.image", f"tony.docker.enabled=true but no image is set for "
                                                          f"{type_name} (set it, or {key})")
    used = key if read(conf, key) else "tony.docker.containers.image"
    if len(image) > 255 or not _IMAGE.match(image):
        raise ConfigError(used, f"{image!r} is not a Docker image reference (e.g. registry:5000/team/image:tag)")
    return checks.launch_value(used, image, what="image")


def with_image(conf: TonyConf, task_type: TaskType) -> TaskType:
    return dataclasses.replace(task_type, docker_image=image_of(conf, task_type.name))


def mounts(conf: TonyConf) -> str | None:
    """YARN's Docker mount list: `source:destination:mode,…`, mode ro or rw, absolute paths."""
    key = "tony.docker.containers.mount"
    raw = read(conf, key)
    if raw is None:
        return None
    for entry in raw.split(","):
        parts = entry.strip().split(":")
        if len(parts) != 3 or not all(p.startswith("/") for p in parts[:2]) or parts[2] not in _MOUNT_MODES:
            raise ConfigError(key, f"bad mount {entry.strip()!r}: expected /source:/destination:ro or …:rw")
    return checks.launch_value(key, ",".join(e.strip() for e in raw.split(",")), what="mount list")
