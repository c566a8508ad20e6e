"""PyTorch: the standard torch.distributed env (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
LOCAL_RANK) plus TonY's INIT_METHOD / RANK / WORLD, so both `init_process_group("gloo")` with
env:// and TonY-era scripts work.

Ranks are global across the trainer types, chief first, then master, then worker, so a job
with a chief does not get two rank-0 processes (TonY's per-type RANK collided there).

With tony.<type>.nproc-per-node=P > 1 every trainer task is one torchrun "node" that starts P
processes (`launch`): torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, … for them
itself, so such a task gets none of those from here, only what its torchrun command line needs
(TONY_TORCHRUN_*). They meet in a c10d rendezvous whose store the rank-0 task hosts on the port
its executor reserved (the address the cluster view names for it); `is_host` says so
explicitly, since torch would otherwise guess it from the host name, and two tasks on one host
would both match. `--max_restarts 0`: a failure ends torchrun, and TonY-py's gang restart is the
only restart. Tasks without torchrun get the TORCHELASTIC_* variables torchrun would give them.
"""

from __future__ import annotations

import shlex

from tony_py.config.traits import TRAINER_TYPES
from tony_py.config.torchrun import MODULE, split_interpreter
from tony_py.frameworks.envplan import EnvPlan

# What a task that runs under torchrun gets, for its torchrun command line (launch()).
NNODES = "TONY_TORCHRUN_NNODES"
NPROC_PER_NODE = "TONY_TORCHRUN_NPROC_PER_NODE"
RDZV_ENDPOINT = "TONY_TORCHRUN_RDZV_ENDPOINT"
IS_HOST = "TONY_TORCHRUN_IS_HOST"
LOCAL_ADDR = "TONY_TORCHRUN_LOCAL_ADDR"
# torchrun's own files (its workers' error files), in the task's working dir (YARN removes it
# with the container) rather than in /tmp; one directory per rendezvous id inside.
LOG_DIR = "tony-torchrun"


def trainers(cluster) -> list[tuple[str, int, str]]:
    out = []
    for name in TRAINER_TYPES:
        for index, addr in enumerate(cluster.get(name, [])):
            out.append((name, index, addr))
    return out


def ranks(ranked) -> dict[tuple[str, int], int]:
    """{(type, index): rank} of trainers() in its order."""
    return {(name, index): rank for rank, (name, index, _addr) in enumerate(ranked)}


def nproc_per_node(spec) -> int:
    """How many processes torchrun starts in each trainer task (1: the job runs no torchrun);
    the client made it the same for every trainer type (config/build.py)."""
    return max((t.nproc_per_node for t in spec.types if t.name in TRAINER_TYPES), default=1)


def plan(spec, cluster, callbacks=None) -> EnvPlan:
    ranked = trainers(cluster)
    if not ranked:
        return EnvPlan(lambda task: {})
    if nproc_per_node(spec) > 1:
        return _torchrun_plan(ranked, nproc_per_node(spec))
    master_addr, _, master_port = ranked[0][2].rpartition(":")
    world = str(len(ranked))
    base = {
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port,
        "WORLD_SIZE": world,
        "WORLD": world,
        "INIT_METHOD": f"tcp://{ranked[0][2]}",
    }
    rank_of = ranks(ranked)

    def env(task) -> dict[str, str]:
        out = dict(base)
        rank = rank_of.get((task.type, task.index))
        if rank is not None:
            # Each task is its own local group: it sees only its own GPUs (CUDA_VISIBLE_DEVICES),
            # so cuda:LOCAL_RANK is its device, as torchrun's one-process-per-node case.
            out.update(RANK=str(rank), LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", GROUP_RANK=str(rank))
        return out

    return EnvPlan(env)


def _torchrun_plan(ranked, nproc: int) -> EnvPlan:
    """Trainer tasks get their torchrun values; the others (evaluator, ps) nothing: the group's
    real master port is one torchrun picks, and the rendezvous port is no process group's."""
    endpoint = ranked[0][2]
    rank_of = ranks(ranked)
    addr_of = {(name, index): addr for name, index, addr in ranked}
    base = {NNODES: str(len(ranked)), NPROC_PER_NODE: str(nproc), RDZV_ENDPOINT: endpoint}

    def env(task) -> dict[str, str]:
        rank = rank_of.get((task.type, task.index))
        if rank is None:
            return {}
        return {**base, IS_HOST: "true" if rank == 0 else "false",
                LOCAL_ADDR: addr_of[(task.type, task.index)].rpartition(":")[0]}

    return EnvPlan(env)


# ---- the executor's side: what the task's process runs ---------------------------------------------
def rdzv_id(env: dict[str, str]) -> str:
    """The rendezvous id: the same for every task of one gang attempt, another in the next
    (the application id and TONY_RESTART_ATTEMPT). torchrun's workers see it as TORCHELASTIC_RUN_ID."""
    return f"{env.get('JOB_ID', 'tony')}-{env.get('TONY_RESTART_ATTEMPT', '0')}"


def torchrun_args(env: dict[str, str], workdir: str) -> list[str]:
    """torchrun's flags for a task, from the values plan() gave it. --local_addr: the task's host
    as the cluster view names it (what torchrun publishes as MASTER_ADDR when this task is group
    rank 0). No --node_rank: c10d ignores it (torch warns so); group ranks come from the
    rendezvous (docs/task-environment.md). --log_dir: absolute, as the workers' error files are
    named by it (a script may change its directory)."""
    return ["--nnodes", env[NNODES], "--nproc_per_node", env[NPROC_PER_NODE],
            "--rdzv_backend", "c10d", "--rdzv_endpoint", env[RDZV_ENDPOINT], "--rdzv_id", rdzv_id(env),
            "--rdzv_conf", f"is_host={env[IS_HOST]}", "--max_restarts", "0", "--local_addr", env[LOCAL_ADDR],
            "--log_dir", f"{workdir.rstrip('/')}/{LOG_DIR}"]


def torchrun_command(command: str, env: dict[str, str], workdir: str) -> str:
    """`<python> <script> <args>` as `<python> -m torch.distributed.run <flags> <script> <args>`:
    the job's own interpreter runs torchrun (and, through it, the script)."""
    interpreter, _, rest = split_interpreter(command)
    return " ".join([interpreter, "-m", MODULE, *map(shlex.quote, torchrun_args(env, workdir)), rest])


def launch(command: str, env: dict[str, str], max_restarts: int, workdir: str) -> tuple[str, dict[str, str]]:
    """The command and env a PyTorch task's process starts with (`env`: what the task gets
    otherwise, with JOB_ID and TONY_RESTART_ATTEMPT). Under torchrun when plan() said so;
    else as it is, with the TORCHELASTIC_* variables elastic scripts read: the gang attempt as
    the restart count, tony.am.retry-count as the most restarts, the application as the run."""
    if NPROC_PER_NODE in env:
        return torchrun_command(command, env, workdir), env
    return command, {**env, "TORCHELASTIC_RESTART_COUNT": env.get("TONY_RESTART_ATTEMPT", "0"),
                     "TORCHELASTIC_MAX_RESTARTS": str(max_restarts), "TORCHELASTIC_RUN_ID": env.get("JOB_ID", "")}
