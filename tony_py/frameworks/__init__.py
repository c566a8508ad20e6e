"""One small module per framework: the cluster view in, the task's environment out.

A cluster view is {job type: ["host:port", ...]} ordered by task index, covering every task
that registered for the current attempt. Each framework module exposes
`task_env(spec, cluster, task) -> dict[str, str]`; the AM calls it when it serves the spec.
"""

from __future__ import annotations

from typing import Callable

from tony_py.config.spec import JobSpec, TaskId
from tony_py.frameworks import pytorch, standalone, tensorflow

ClusterView = dict[str, list[str]]
EnvBuilder = Callable[[JobSpec, ClusterView, TaskId], dict[str, str]]

_BUILDERS: dict[str, EnvBuilder] = {
    "tensorflow": tensorflow.task_env,
    "pytorch": pytorch.task_env,
    "standalone": standalone.task_env,
}


def task_env(spec: JobSpec, cluster: ClusterView, task: TaskId) -> dict[str, str]:
    return _BUILDERS[spec.framework](spec, cluster, task)
