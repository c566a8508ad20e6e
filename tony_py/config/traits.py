"""What each framework asks of a job, as data: read by the config checks (build.py), the spec
(the chief), the executor (its log line) and the advice, and by the framework registry
(tony_py/frameworks/__init__.py), which adds the code: the env plan, the launch, readiness.

A new framework is a module in tony_py/frameworks/, its traits here and its entry in the
registry (docs/development.md: Adding a framework); a unit test fails when a name lacks either.
"""

from __future__ import annotations

from dataclasses import dataclass

TRAINER_TYPES = ("chief", "master", "worker")


@dataclass(frozen=True)
class Traits:
    name: str
    doc: str
    ranked: bool = False  # one rank (process) per trainer task: the job needs trainer tasks
    elastic: bool = False  # a task's env is a function of the cluster view alone: a gang may shrink
    gang_only: str | None = None  # why the framework needs GANG mode (None: FCFS works too)
    torchrun: bool = False  # tony.<type>.nproc-per-node > 1 runs a trainer task under torchrun
    single_task: bool = False  # runs exactly one task
    needs_one: str | None = None  # a type the job must have exactly one task of
    chief_type: str | None = None  # whose task 0 is the chief, before TonY's rule (chief, then worker)
    added_type: str | None = None  # a type TonY-py adds and sizes itself (its keys are refused)
    wrapped: str = ""  # how the executor's log says what the launch made of the command


FRAMEWORK_TRAITS: dict[str, Traits] = {t.name: t for t in (
    Traits("tensorflow", "TF_CONFIG and CLUSTER_SPEC for every task", elastic=True),
    Traits("pytorch", "RANK, WORLD_SIZE, MASTER_ADDR/PORT; torchrun with nproc-per-node > 1", ranked=True,
           elastic=True, torchrun=True, wrapped=" under torchrun"),
    Traits("horovod", "Horovod's rendezvous: TonY-py adds and runs its driver", gang_only="its workers start together",
           added_type="driver"),
    Traits("mxnet", "MXNet's parameter-server roles (DMLC_*)", needs_one="scheduler"),
    Traits("jax", "one coordinator every process joins", ranked=True, elastic=True,
           gang_only="every process joins one coordinator"),
    Traits("ray", "a Ray cluster: the head runs the command as its driver, workers run worker nodes",
           gang_only="the worker nodes join the head at the address the complete gang's spec names",
           chief_type="head", wrapped=" as a Ray node"),
    Traits("standalone", "one task, no rendezvous", single_task=True),
)}
FRAMEWORKS = tuple(FRAMEWORK_TRAITS)


def traits(framework: str) -> Traits:
    return FRAMEWORK_TRAITS[framework]
