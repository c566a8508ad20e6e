"""JAX: what `jax.distributed.initialize()` needs, in the names JAX and Kubeflow's JAXJob use.

JAX reads the coordinator's address itself (JAX_COORDINATOR_ADDRESS) but finds the process
count and id only on the clusters it knows (Slurm, Open MPI, Kubernetes, TPUs), not on YARN,
so a script passes them: `jax.distributed.initialize(num_processes=int(os.environ[
"JAX_NUM_PROCESSES"]), process_id=int(os.environ["JAX_PROCESS_ID"]))`. Kubeflow's JAX examples
read COORDINATOR_ADDRESS (the host), COORDINATOR_PORT, NUM_PROCESSES and PROCESS_ID and run
unchanged.

Processes are numbered as PyTorch's ranks (chief, master, then worker); process 0 runs the
coordinator on the port its executor reserved. JAX would bind it to every address ([::]);
JAX_COORDINATOR_BIND_ADDRESS keeps it on the task's own.
"""

from __future__ import annotations

from tony_py.frameworks.envplan import EnvPlan
from tony_py.frameworks.pytorch import ranks, trainers


def plan(spec, cluster, callbacks=None) -> EnvPlan:
    ranked = trainers(cluster)
    if not ranked:
        return EnvPlan(lambda task: {})
    coordinator = ranked[0][2]
    host, _, port = coordinator.rpartition(":")
    count = str(len(ranked))
    base = {"JAX_COORDINATOR_ADDRESS": coordinator, "JAX_NUM_PROCESSES": count,
            "COORDINATOR_ADDRESS": host, "COORDINATOR_PORT": port, "NUM_PROCESSES": count}
    process_of = ranks(ranked)

    def env(task) -> dict[str, str]:
        out = dict(base)
        process = process_of.get((task.type, task.index))
        if process is not None:
            out.update(JAX_PROCESS_ID=str(process), PROCESS_ID=str(process))
            if process == 0:
                out["JAX_COORDINATOR_BIND_ADDRESS"] = coordinator
        return out

    return EnvPlan(env)
