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

from typing import Callable

from tony_py.config.spec import JobSpec, TaskId
from tony_py.frameworks import horovod, jax, mxnet, pytorch, ray, standalone, tensorflow
from tony_py.frameworks.envplan import EnvPlan, expand

ClusterView = dict[str, list[str]]
Callbacks = dict[str, dict]  # task name -> what its process reported back (Horovod's driver port)
PlanBuilder = Callable[[JobSpec, ClusterView, Callbacks], EnvPlan]

_PLANS: dict[str, PlanBuilder] = {
    "tensorflow": tensorflow.plan,
    "pytorch": pytorch.plan,
    "horovod": horovod.plan,
    "mxnet": mxnet.plan,
    "jax": jax.plan,
    "ray": ray.plan,
    "standalone": standalone.plan,
}


def plan(spec: JobSpec, cluster: ClusterView, callbacks: Callbacks | None = None) -> EnvPlan:
    if spec.single_node:
        return EnvPlan(lambda task: {})  # one process on the AM's node: nothing to rendezvous with
    return _PLANS[spec.framework](spec, cluster, callbacks or {})


def task_env(spec: JobSpec, cluster: ClusterView, task: TaskId, callbacks: Callbacks | None = None) -> dict[str, str]:
    """One task's environment as the task sees it (shared values expanded)."""
    p = plan(spec, cluster, callbacks)
    return expand(p.env(task), p.shared)


def launch(framework: str, command: str, env: dict[str, str], max_restarts: int,
           workdir: str) -> tuple[str, dict[str, str]]:
    """The command and env a task's process starts with (in workdir), from its own: the
    executor's last step."""
    if framework == "pytorch":
        return pytorch.launch(command, env, max_restarts, workdir)
    if framework == "ray":
        return ray.launch(command, env)
    return command, env


def ready(spec: JobSpec, task: TaskId, callbacks: Callbacks) -> bool:
    """Whether a task of a complete gang may start now (Horovod's workers wait for the driver,
    Ray's worker nodes for the head's)."""
    if spec.framework == "horovod":
        return horovod.ready(spec, task, callbacks)
    if spec.framework == "ray":
        return ray.ready(spec, task, callbacks)
    return True
