"""One small module per framework: the cluster view in, the task's environment out.

A cluster view is {job type: ["host:port", ...]} ordered by task index, covering every task
that registered for the current attempt. Each framework module exposes
`task_env(spec, cluster, task) -> dict[str, str]`; the AM calls it when it serves the spec.
"""

from __future__ import annotations

from typing import Callable

from tony_py.config.spec import JobSpec, TaskId
from tony_py.frameworks import horovod, mxnet, pytorch, standalone, tensorflow

ClusterView = dict[str, list[str]]
Callbacks = dict[str, dict]  # task name -> what its process reported back (Horovod's driver port)
EnvBuilder = Callable[[JobSpec, ClusterView, TaskId, Callbacks], dict[str, str]]

_BUILDERS: dict[str, EnvBuilder] = {
    "tensorflow": tensorflow.task_env,
    "pytorch": pytorch.task_env,
    "horovod": horovod.task_env,
    "mxnet": mxnet.task_env,
    "standalone": standalone.task_env,
}


def task_env(spec: JobSpec, cluster: ClusterView, task: TaskId, callbacks: Callbacks | None = None) -> dict[str, str]:
    if spec.single_node:
        return {}  # one process on the AM's node: nothing to rendezvous with (TonY set no cluster env)
    return _BUILDERS[spec.framework](spec, cluster, task, callbacks or {})


def ready(spec: JobSpec, task: TaskId, callbacks: Callbacks) -> bool:
    """Whether a task of a complete gang may start now (Horovod's workers wait for the driver)."""
    return horovod.ready(spec, task, callbacks) if spec.framework == "horovod" else True
