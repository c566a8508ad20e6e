"""What a task uses, sampled every tony.task.metrics-interval-ms by its executor.

Per sample: the process tree's resident memory and CPU (psutil), and, for a task that holds
GPUs (tony.task.gpu-metrics.enabled), its GPUs' utilisation and memory from
`nvidia-smi --query-gpu=… --format=csv,noheader,nounits` (no nvidia-smi: no GPU metrics, no
error; it is given up after 10 failures in a row, as TonY did). Maximum and average per task
attempt keep TonY's names (MAX_MEMORY_BYTES, AVG_MEMORY_BYTES, MAX_GPU_UTILIZATION,
AVG_GPU_UTILIZATION, MAX_GPU_FB_MEMORY_USAGE, AVG_GPU_FB_MEMORY_USAGE — GPU memory in percent of
the device's), next to the current values the live views show.
"""

from __future__ import annotations

import resource
import subprocess
import time

from tony_py.executor.process import load_psutil  # imported at the first sample, not at start

GPU_QUERY = "index,uuid,utilization.gpu,memory.used,memory.total"
NVIDIA_SMI_TIMEOUT_S = 10
MAX_GPU_ERRORS = 10


def query_gpus(nvidia_smi: str) -> list[dict]:
    """Every GPU nvidia-smi reports: index, uuid, utilisation (%), memory used/total (MiB)."""
    out = subprocess.run([nvidia_smi, f"--query-gpu={GPU_QUERY}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout
    return parse_gpus(out)


def parse_gpus(csv: str) -> list[dict]:
    """nvidia-smi's CSV answer to GPU_QUERY. A field the device or driver does not report reads
    `[N/A]`, `[Not Supported]` or similar (MIG slices, some virtual GPUs): None, not an error, so
    the fields it does report are still measured. A line that is not five fields is an error."""
    gpus = []
    for line in csv.strip().splitlines():
        fields = [x.strip() for x in line.split(",")]
        if len(fields) != 5:
            raise ValueError(f"nvidia-smi answered {line!r} to --query-gpu={GPU_QUERY}")
        index, uuid, util, used, total = fields
        gpus.append({"index": index, "uuid": uuid, "utilization": _reading(util), "memory_used_mib": _reading(used),
                     "memory_total_mib": _reading(total)})
    return gpus


def _reading(field: str) -> float | None:
    """A number, or None where nvidia-smi has none to give ([N/A], [Not Supported], [Unknown Error])."""
    if (field.startswith("[") and field.endswith("]")) or field.upper() == "N/A":
        return None
    return float(field)


class _Series:
    """Max and running average of one quantity over an attempt."""

    def __init__(self) -> None:
        self.max = 0.0
        self.total = 0.0
        self.count = 0

    def add(self, value: float) -> None:
        self.max = max(self.max, value)
        self.total += value
        self.count += 1

    @property
    def avg(self) -> float:
        return self.total / self.count if self.count else 0.0


class MetricsSampler:
    def __init__(self, gpus_wanted: bool, visible_devices: str | None = None, nvidia_smi: str | None = None):
        # where nvidia-smi is, the caller knows (executor/gpus.py find_nvidia_smi): one lookup
        self.nvidia_smi = nvidia_smi if gpus_wanted else None
        self.devices = [d.strip() for d in (visible_devices or "").split(",") if d.strip()] or None
        self.gpu_errors = 0
        self.series = {name: _Series() for name in ("MEMORY_BYTES", "CPU_UTILIZATION", "GPU_UTILIZATION",
                                                    "GPU_FB_MEMORY_USAGE")}
        self._cpu_seen: dict[int, float] = {}
        self._cpu_at: float | None = None

    def sample(self, root_pid: int | None) -> dict:
        current = {"executor_max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}
        procs = _tree(root_pid)
        if procs:
            rss, cpu = 0, 0.0
            now = time.monotonic()
            seen = {}
            for proc in procs:
                try:
                    rss += proc.memory_info().rss
                    times = proc.cpu_times()
                    seen[proc.pid] = times.user + times.system
                except load_psutil().Error:
                    continue
            if self._cpu_at is not None and now > self._cpu_at:
                # a process new since the last sample counts from now on (its past is not this interval's)
                used = sum(t - self._cpu_seen.get(pid, t) for pid, t in seen.items())
                cpu = max(0.0, used / (now - self._cpu_at) * 100)
                current["task_cpu_percent"] = round(cpu, 1)
                self.series["CPU_UTILIZATION"].add(cpu)
            self._cpu_seen, self._cpu_at = seen, now
            current["task_rss_bytes"] = rss
            self.series["MEMORY_BYTES"].add(rss)
        current.update(self._gpus())
        return {**current, **self.summary()}

    def _gpus(self) -> dict:
        if not self.nvidia_smi or self.gpu_errors >= MAX_GPU_ERRORS:
            return {}
        try:
            gpus = query_gpus(self.nvidia_smi)
            self.gpu_errors = 0
        except (OSError, subprocess.SubprocessError, ValueError):
            self.gpu_errors += 1
            return {}
        mine = [g for g in gpus if self.devices is None or g["index"] in self.devices or g["uuid"] in self.devices]
        if not mine:
            return {}
        out: dict = {"gpu_count": len(mine)}
        utils = [g["utilization"] for g in mine if g["utilization"] is not None]
        if utils:  # the devices that report it
            util = sum(utils) / len(utils)
            self.series["GPU_UTILIZATION"].add(util)
            out["gpu_utilization"] = round(util, 1)
        memory = [(g["memory_used_mib"], g["memory_total_mib"]) for g in mine
                  if g["memory_used_mib"] is not None and g["memory_total_mib"]]
        if memory:
            used, total = sum(u for u, _ in memory), sum(t for _, t in memory)
            self.series["GPU_FB_MEMORY_USAGE"].add(used / total * 100)
            out.update(gpu_memory_used_bytes=int(used * 2**20), gpu_memory_total_bytes=int(total * 2**20))
        return out

    def summary(self) -> dict:
        out = {}
        for name, series in self.series.items():
            if series.count:
                out[f"MAX_{name}"] = round(series.max, 2)
                out[f"AVG_{name}"] = round(series.avg, 2)
        return out


def _tree(pid: int | None) -> list:
    psutil = load_psutil() if pid else None
    if psutil is None:
        return []
    try:
        root = psutil.Process(pid)
        return [root] + root.children(recursive=True)
    except psutil.Error:
        return []
