"""Ray: one `head` task runs Ray's head node and the user's script as the Ray driver, `worker`
tasks run Ray worker nodes that join it. Pure: what each task is told (plan) and the `ray start`
command line a node runs (start_args); the processes are ray_node.py's.

The head's Global Control Service (GCS) listens on the port its executor reserved, which the
cluster view names, so the workers' `--address` is the head's entry there. A worker's reserved
port becomes its raylet's (node manager) port. Every other port a Ray node opens is one the node
runner reserves the same way (bound, held until `ray start` runs), never Ray's fixed defaults
(8265, 10001, 52365, ...): the local cluster and busy shared nodes run several Ray nodes on one
host. Worker processes bind ports the OS picks (`--min-worker-port 0`), so two raylets on a host
never race for one range. Each node has a temp dir of its own.

Ray sizes itself from the host (30 % of its memory for the object store, every CPU); a YARN
container has less, and a node that grows past it is killed, so the node's CPUs, GPUs, memory
and object store come from the container's resources (`resources`).
"""

from __future__ import annotations

from tony_py.config.ray_limits import RAY_DAEMONS_MB as DAEMONS_MB
from tony_py.config.ray_limits import RAY_MIN_OBJECT_STORE_MB as MIN_OBJECT_STORE_MB
from tony_py.config.ray_limits import RAY_MIN_TASK_MEMORY_MB as MIN_TASK_MEMORY_MB
from tony_py.config.ray_limits import ray_join_timeout as join_timeout  # noqa: F401 - the node runner's too
from tony_py.config.torchrun import split_interpreter
from tony_py.frameworks.envplan import EnvPlan

HEAD_TYPE = "head"
WORKER_TYPE = "worker"
ROLE = "TONY_RAY_ROLE"  # head | worker
HEAD_ADDRESS = "TONY_RAY_HEAD_ADDRESS"  # host:port of the head's GCS: what workers and the driver join
NODE_ADDRESS = "TONY_RAY_NODE_ADDRESS"  # this task's host:port from the cluster view
NODE_NAME = "TONY_RAY_NODE_NAME"  # the task (head:0, worker:1): Ray's node name, on its dashboard too
WORKERS = "TONY_RAY_WORKERS"  # the head's list of the nodes it waits for: worker:0=host:port,...
CPUS, GPUS, MEMORY_MB = "TONY_RAY_NUM_CPUS", "TONY_RAY_NUM_GPUS", "TONY_RAY_MEMORY_MB"
# Every port a node opens besides its reserved one; the head adds the dashboard and Ray Client's.
NODE_PORTS = ("object-manager-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
              "metrics-export-port", "runtime-env-agent-port")
HEAD_PORTS = ("node-manager-port", "dashboard-port", "ray-client-server-port")
MIB = 1 << 20
OBJECT_STORE_SHARE = 0.3  # Ray's own default share, of the container instead of the host


def plan(spec, cluster, callbacks=None) -> EnvPlan:
    heads = cluster.get(HEAD_TYPE, [])
    if not heads:
        return EnvPlan(lambda task: {})
    head = heads[0]
    workers = ",".join(f"{WORKER_TYPE}:{i}={addr}" for i, addr in enumerate(cluster.get(WORKER_TYPE, [])))

    def env(task) -> dict[str, str]:
        addresses = cluster.get(task.type, [])
        if task.type not in (HEAD_TYPE, WORKER_TYPE) or task.index >= len(addresses):
            return {}
        r = spec.type(task.type).resources
        out = {ROLE: task.type, HEAD_ADDRESS: head, NODE_ADDRESS: addresses[task.index],
               NODE_NAME: f"{task.type}:{task.index}", CPUS: str(r.vcores), GPUS: str(r.gpus),
               MEMORY_MB: str(r.memory_mb)}
        if task.type == HEAD_TYPE:
            out[WORKERS] = workers
        return out

    return EnvPlan(env)


def ready(spec, task, callbacks: dict) -> bool:
    """Worker nodes start once the head's node is up (it announced its dashboard): nodes that
    start together on one busy host miss Ray's 30 s registration window, and a worker started
    before the head only retries its connection meanwhile."""
    return task.type != WORKER_TYPE or bool((callbacks or {}).get(f"{HEAD_TYPE}:0", {}).get("dashboard_url"))


def resources(role: str, memory_mb: int) -> tuple[int, int]:
    """(Ray's `memory` resource, its object store), in bytes, for a container of memory_mb:
    the object store takes 30 % (at least 80 MiB), Ray's own daemons their measured share, and
    tasks may reserve the rest."""
    store_mb = max(MIN_OBJECT_STORE_MB, int(memory_mb * OBJECT_STORE_SHARE))
    task_mb = max(MIN_TASK_MEMORY_MB, memory_mb - store_mb - DAEMONS_MB[role])
    return task_mb * MIB, store_mb * MIB


def ports_needed(role: str) -> tuple[str, ...]:
    """The `ray start` port options the node runner reserves a port for."""
    return NODE_PORTS + HEAD_PORTS if role == HEAD_TYPE else NODE_PORTS


def start_args(env: dict[str, str], ports: dict[str, int], temp_dir: str) -> list[str]:
    """`ray start`'s arguments for this task's node (after `ray start`), from the env plan() gave
    it and the ports the runner reserved ({option: port}). --block: the command stays the
    parent of the node's processes, which Ray then ties to it (they die with it)."""
    role = env[ROLE]
    host, _, own_port = env[NODE_ADDRESS].rpartition(":")
    memory, store = resources(role, int(env[MEMORY_MB]))
    args = ["--block", "--disable-usage-stats", "--node-ip-address", host, "--node-name", env[NODE_NAME],
            "--temp-dir", temp_dir, "--num-cpus", env[CPUS], "--num-gpus", env[GPUS],
            "--memory", str(memory), "--object-store-memory", str(store),
            "--min-worker-port", "0", "--max-worker-port", "0"]
    if role == HEAD_TYPE:
        # the GCS on the reserved port; the dashboard on this node's address, not 0.0.0.0
        args += ["--head", "--port", own_port, "--include-dashboard", "true", "--dashboard-host", host]
    else:
        args += ["--address", env[HEAD_ADDRESS], "--node-manager-port", own_port]
    for option in ports_needed(role):
        args += [f"--{option}", str(ports[option])]
    return args


def expected_workers(env: dict[str, str]) -> dict[str, str]:
    """{node name: host:port} of the worker nodes the head waits for."""
    out = {}
    for item in filter(None, env.get(WORKERS, "").split(",")):
        name, _, address = item.partition("=")
        out[name] = address
    return out


def dashboard_url(env: dict[str, str], ports: dict[str, int]) -> str:
    host = env[NODE_ADDRESS].rpartition(":")[0]
    return f"http://{host}:{ports['dashboard-port']}"


DRIVER_COMMAND = "TONY_RAY_DRIVER_COMMAND"  # the task's own command, which the head runs as the driver
RUNNER = "tony_py.frameworks.ray_node"


def launch(command: str, env: dict[str, str], _max_restarts: int = 0, _workdir: str = "") -> tuple[str, dict[str, str]]:
    """What a ray task's process runs: the node runner, with the command's own interpreter (so
    the job's venv and its ray run the node); the command itself, on the head, becomes the
    driver the runner starts once every worker node has joined."""
    if ROLE not in env:
        return command, env
    interpreter, _, _ = split_interpreter(command)
    return f"{interpreter} -m {RUNNER}", {**env, DRIVER_COMMAND: command}
