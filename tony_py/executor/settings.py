"""What an executor knows before it runs anything: its settings (from the container's env and
the job spec the AM served), and the instructions the AM may answer any call with."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path

from tony_py.config.spec import JobSpec, TaskId


@dataclass
class Settings:
    task: str
    am_url: str
    secret: str = field(repr=False)
    container_id: str
    command: str
    execution_env: dict
    heartbeat_s: float
    metrics_interval_s: float
    execution_timeout_s: float
    registry_timeout_s: float
    reserve_tb_port: bool
    src_zip: str | None
    runtime_dir: str
    log_dir: Path
    am_lost_timeout_s: float
    single_node: bool = False
    host: str = "localhost"
    gpus: int = 0  # what the task's type asked for
    gpu_metrics: bool = True
    gpu_assignment: str = "auto"
    lease_s: float = 10.0  # tony.task.executor.lease-sec (lease.py)
    framework: str = ""  # tony.application.framework (frameworks.launch)
    max_restarts: int = 0  # gang restarts the job may take: tony.am.retry-count + max-infrastructure-restarts

    @classmethod
    def load(cls, env: dict, spec: JobSpec, secret: str) -> "Settings":
        """From the container env (where and who) and the job spec the AM served (what to run:
        YARN passes env values through a shell script unescaped, so commands do not travel there)."""
        task = TaskId.parse(env["TONY_TASK"])
        return cls(
            task=str(task),
            am_url=env["TONY_AM_URL"],
            secret=secret,
            container_id=env.get("CONTAINER_ID", ""),
            command=spec.command_for(task.type),
            execution_env=dict(spec.execution_env),
            heartbeat_s=spec.heartbeat_interval_ms / 1000,
            metrics_interval_s=spec.metrics_interval_ms / 1000,
            execution_timeout_s=spec.execution_timeout_ms / 1000,
            registry_timeout_s=float(spec.registry_timeout_s),
            reserve_tb_port=env.get("TONY_RESERVE_TB_PORT") == "1",
            src_zip=env.get("TONY_SRC_ZIP"),
            runtime_dir=env.get("TONY_RUNTIME_DIR", ""),
            log_dir=Path((env.get("LOG_DIRS") or ".").split(",")[0]),
            am_lost_timeout_s=float(spec.am_lost_timeout_s),
            single_node=spec.single_node,
            host=env.get("NM_HOST") or socket.getfqdn(),
            gpus=spec.type(task.type).resources.gpus,
            gpu_metrics=spec.gpu_metrics,
            gpu_assignment=spec.gpu_assignment,
            lease_s=float(spec.lease_s),
            framework=spec.framework,
            max_restarts=spec.am_retry_count + spec.max_infrastructure_restarts,
        )


class Instruction(Exception):
    """The AM told this executor to exit or to restart at another attempt."""

    def __init__(self, answer: dict):
        super().__init__(answer.get("action"))
        self.action = answer.get("action")
        self.attempt = int(answer.get("attempt", 0))
        self.reason = answer.get("reason", "")


def check(answer: dict | None) -> dict | None:
    """The answer, unless it is an instruction (raised)."""
    if answer and answer.get("action") in ("exit", "restart"):
        raise Instruction(answer)
    return answer
