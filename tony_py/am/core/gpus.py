"""Which GPU is whose: the devices each task's container holds, per node.

YARN counts GPUs (`yarn.io/gpu`) and, only with the LinuxContainerExecutor and cgroups, also
assigns devices and fences the others off; it never tells a process which devices are its own
(no CUDA_VISIBLE_DEVICES; NVIDIA_VISIBLE_DEVICES only for Docker containers). So:

- where a NodeManager assigned devices (its GPU plugin under the LinuxContainerExecutor), the
  executor reads them from the NodeManager's REST API (tony_py/executor/gpus.py) and reports
  them at registration: they are the truth;
- where the cluster only counts GPUs (DefaultContainerExecutor, the local cluster, most test
  clusters), the AM gives each container the lowest device indices no other running task of
  this job holds on that node, and frees them when the container ends (a task restarted in
  place keeps its container, so it keeps its devices);
- in local mode the pool is this machine's devices (CUDA_VISIBLE_DEVICES if set, else what
  nvidia-smi lists), and asking for more than it has is refused before anything starts.

Without isolation nothing stops another application on the same node from picking the same
index; real separation needs the LinuxContainerExecutor with cgroups (docs/architecture.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess


class GpuBook:
    def __init__(self) -> None:
        self.pools: dict[str, list[str]] = {}  # node -> its devices, where known (local mode)
        self.held: dict[str, tuple[str, list[str]]] = {}  # container id -> (node, devices)

    def set_pool(self, node_id: str, devices: list[str]) -> None:
        self.pools[node_id] = list(devices)

    def in_use(self, node_id: str) -> set[str]:
        return {d for node, devices in self.held.values() if node == node_id for d in devices}

    def assign(self, node_id: str, container_id: str, count: int) -> list[str]:
        """Devices for a new container: the lowest free ones on its node."""
        if container_id in self.held:
            return self.held[container_id][1]
        busy = self.in_use(node_id)
        if node_id in self.pools:
            free = [d for d in self.pools[node_id] if d not in busy]
            if len(free) < count:
                raise RuntimeError(f"{count} GPU(s) wanted on {node_id}, {len(free)} free of {len(self.pools[node_id])}")
            chosen = free[:count]
        else:  # YARN counted them for us: indices from 0, skipping what this job holds there
            chosen, index = [], 0
            while len(chosen) < count:
                if str(index) not in busy:
                    chosen.append(str(index))
                index += 1
        self.held[container_id] = (node_id, chosen)
        return chosen

    def record(self, node_id: str, container_id: str, devices: list[str]) -> None:
        """What the NodeManager says it assigned (overrides the AM's choice)."""
        self.held[container_id] = (node_id, list(devices))

    def release(self, container_id: str) -> None:
        self.held.pop(container_id, None)

    def of(self, container_id: str) -> list[str]:
        return list(self.held.get(container_id, ("", []))[1])


def visible_devices_env(devices: list[str], docker: bool) -> dict[str, str]:
    """The variables that name a task's devices. In a Docker container YARN's runtime exposes
    exactly the assigned devices (renumbered from 0) through NVIDIA_VISIBLE_DEVICES itself, so
    nothing is set there."""
    if docker or not devices:
        return {}
    joined = ",".join(devices)
    return {"CUDA_VISIBLE_DEVICES": joined, "NVIDIA_VISIBLE_DEVICES": joined}


# ---- local mode: this machine's devices -------------------------------------------------------------
def local_devices(env: dict[str, str] | None = None) -> list[str]:
    """CUDA_VISIBLE_DEVICES if set (the user already chose), else every device nvidia-smi lists,
    else none."""
    env = os.environ if env is None else env
    chosen = env.get("CUDA_VISIBLE_DEVICES")
    if chosen is not None:
        return [d.strip() for d in chosen.split(",") if d.strip() and d.strip() != "-1"]
    smi = shutil.which("nvidia-smi", path=env.get("PATH"))
    if not smi:
        return []
    try:
        out = subprocess.run([smi, "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True,
                             timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip().isdigit()]
