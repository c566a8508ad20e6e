"""One small module per framework: the cluster view in, each task's environment out.

A cluster view is {job type: ["host:port", ...]} ordered by task index, covering every task
that registered for the current attempt. Each framework module exposes
`plan(spec, cluster, callbacks) -> EnvPlan` (envplan.py): what depends on the whole cluster is
computed once per view, and `plan.env(task)` is then cheap for each task (a 2,000-task gang is
served in one pass, not 2,000 passes over the cluster). The AM builds the plan when it serves
the spec. The executor then asks `launch` what the task's process runs (PyTorch may wrap the
command in torchrun; a Ray task runs a Ray node, and the head the command as its driver).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from tony_py.config.spec import JobSpec, TaskId
from tony_py.config.traits import FRAMEWORKS, Traits, traits
from tony_py.frameworks import horovod, jax, mxnet, pytorch, ray, standalone, tensorflow
from tony_py.frameworks.envplan import EnvPlan, expand

ClusterView = dict[str, list[str]]
Callbacks = dict[str, dict]  # task name -> what its process reported back (Horovod's driver port)
PlanBuilder = Callable[[JobSpec, ClusterView, Callbacks], EnvPlan]
# (command, env, max_restarts, workdir) -> the command and env the task's process starts with
Launch = Callable[[str, dict[str, str], int, str], tuple[str, dict[str, str]]]
Ready = Callable[[JobSpec, TaskId, Callbacks], bool]


def _as_given(command: str, env: dict[str, str], _max_restarts: int, _workdir: str) -> tuple[str, dict[str, str]]:
    return command, env


@dataclass(frozen=True)
class Framework:
    """All a framework is: what it asks of a job (traits, config/traits.py), each task's env
    from the cluster view (plan), what a task's process runs (launch), and whether a task of a
    complete gang may start yet (ready)."""

    traits: Traits
    plan: PlanBuilder
    launch: Launch = _as_given
    ready: Ready = lambda spec, task, callbacks: True


REGISTRY: dict[str, Framework] = {f.traits.name: f for f in (
    Framework(traits("tensorflow"), tensorflow.plan),
    Framework(traits("pytorch"), pytorch.plan, launch=pytorch.launch),
    Framework(traits("horovod"), horovod.plan, ready=horovod.ready),
    Framework(traits("mxnet"), mxnet.plan),
    Framework(traits("jax"), jax.plan),
    Framework(traits("ray"), ray.plan, launch=ray.launch, ready=ray.ready),
    Framework(traits("standalone"), standalone.plan),
)}
if tuple(REGISTRY) != FRAMEWORKS:
    raise ImportError(f"frameworks without a registry entry or traits: {set(REGISTRY) ^ set(FRAMEWORKS)}")


def plan(spec: JobSpec, cluster: ClusterView, callbacks: Callbacks | None = None) -> EnvPlan:
    if spec.single_node:
        return EnvPlan(lambda task: {})  # one process on the AM's node: nothing to rendezvous with
    return REGISTRY[spec.framework].plan(spec, cluster, callbacks or {})


def task_env(spec: JobSpec, cluster: ClusterView, task: TaskId, callbacks: Callbacks | None = None) -> dict[str, str]:
    """One task's environment as the task sees it (shared values expanded)."""
    p = plan(spec, cluster, callbacks)
    return expand(p.env(task), p.shared)


def launch(framework: str, command: str, env: dict[str, str], max_restarts: int,
           workdir: str) -> tuple[str, dict[str, str]]:
    """The command and env a task's process starts with (in workdir), from its own: the
    executor's last step (PyTorch may wrap the command in torchrun; a Ray task runs a node)."""
    return REGISTRY[framework].launch(command, env, max_restarts, workdir)


def ready(spec: JobSpec, task: TaskId, callbacks: Callbacks) -> bool:
    """Whether a task of a complete gang may start now (Horovod's workers wait for the driver,
    Ray's worker nodes for the head's)."""
    return REGISTRY[spec.framework].ready(spec, task, callbacks)
