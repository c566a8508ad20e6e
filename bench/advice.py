"""What the examples ask for against what they use, before and after `tony advise --write`
(JSON on stdout): each example runs as shipped, is advised, and runs again with the written
tony.xml; the baseline is the shipped configuration.

    .venv/bin/python bench/advice.py [--examples tf_multi_worker,pytorch_ddp,...] [--out FILE]

Per example and run: each task type's request (memory MB, vcores, GPUs per task, instances) and
its use (the peak of a task's process tree plus its executor, the busiest interval's cores),
the job's final status, wall time and test accuracy, and the findings. A local process cluster
(.bench-advice-cluster) is brought up for it and stopped after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py.cluster.processes import LocalCluster  # noqa: E402
from tony_py.config.values import parse_memory_mb  # noqa: E402

EXAMPLES = {  # (src_dir, script, tony.xml), as tests/integration/test_training_on_hdfs.py runs them (local data)
    "tf_multi_worker": ("examples/tensorflow", "multi_worker.py", "examples/tensorflow/multi_worker.xml"),
    "tf_parameter_server": ("examples/tensorflow", "parameter_server.py", "examples/tensorflow/parameter_server.xml"),
    "pytorch_ddp": ("examples/pytorch_ddp", "train.py", "examples/pytorch_ddp/tony.xml"),
    "jax_dp": ("examples/jax_dp", "train.py", "examples/jax_dp/tony.xml"),
}
MIB = 1 << 20
CLUSTER_DIR = ROOT / ".bench-advice-cluster"


def tony(env: dict, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tony_py.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


def run_once(env: dict, name: str, conf_file: str, ckpt: str) -> dict:
    src, script, _ = EXAMPLES[name]
    started = time.monotonic()
    proc = tony(env, "submit", "--src_dir", str(ROOT / src), "--executes", script, "--python_binary_path",
                sys.executable, "--conf_file", conf_file, "--conf", "tony.task.metrics-interval-ms=1000",
                "--task_params", f"--checkpoint_dir {ckpt}")
    app_id = next(iter(re.findall(r"application_\d+_\d+", proc.stdout)), None)
    out = {"app_id": app_id, "exit_code": proc.returncode, "wall_s": round(time.monotonic() - started, 1)}
    if app_id is None:
        out["output_tail"] = (proc.stdout + proc.stderr)[-2000:]
        return out
    shown = json.loads(tony(env, "history", "show", app_id, "--config", "--json").stdout)
    out["test_accuracy"] = test_accuracy(app_id)
    out["types"] = per_type(shown)
    advice = json.loads(tony(env, "advise", app_id, "--json").stdout)
    out["findings"] = [{k: f[k] for k in ("heuristic", "severity", "task_type", "suggestion")} for f in advice["findings"]]
    out["waste"] = advice["waste"]
    return out


def test_accuracy(app_id: str) -> float | None:
    """The lowest accuracy a task printed (the examples print it on stdout, kept in the NM's log dir)."""
    found = [float(m) for p in CLUSTER_DIR.glob(f"data/nm*/logs/{app_id}/container_*/attempt-*.stdout")
             for m in re.findall(r"test accuracy: ([0-9.]+)", p.read_text(errors="replace"))]
    return min(found) if found else None


def per_type(shown: dict) -> dict:
    conf, types = shown["config"], {}
    for t in shown["tasks"]:
        kind, m = t["type"], t.get("metrics") or {}
        entry = types.setdefault(kind, {
            "instances": int(conf.get(f"tony.{kind}.instances", 0) or 0), "memory": conf.get(f"tony.{kind}.memory"),
            "vcores": conf.get(f"tony.{kind}.vcores"), "gpus": conf.get(f"tony.{kind}.gpus"),
            "peak_mb": 0.0, "peak_cores": 0.0})
        if "MAX_MEMORY_BYTES" in m:
            entry["peak_mb"] = round(max(entry["peak_mb"], (m["MAX_MEMORY_BYTES"] + m.get("executor_max_rss_bytes", 0)) / MIB))
        if "MAX_CPU_UTILIZATION" in m:
            entry["peak_cores"] = round(max(entry["peak_cores"], m["MAX_CPU_UTILIZATION"] / 100), 2)
    return types


def requested_mb(run: dict) -> int:
    """The memory the job's tasks asked for, all of them together."""
    return sum(t["instances"] * parse_memory_mb(t["memory"] or "2g", "memory") for t in run["types"].values())


def used_mb(run: dict) -> int:
    """Each type's busiest task's peak, times the type's instances."""
    return round(sum(t["instances"] * t["peak_mb"] for t in run["types"].values()))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--examples", default=",".join(EXAMPLES))
    p.add_argument("--out")
    opts = p.parse_args()
    launcher = LocalCluster(CLUSTER_DIR)
    launcher.down(purge=True)
    state, _ = launcher.up(timeout=240)
    env = dict(os.environ, HADOOP_CONF_DIR=state.conf_dir)
    results = {"benchmark": "advice", "cpu_count": os.cpu_count(), "baseline": "each example's shipped tony.xml",
               "examples": {}}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for name in opts.examples.split(","):
                before = run_once(env, name, str(ROOT / EXAMPLES[name][2]), f"{tmp}/{name}-before")
                written = f"{tmp}/{name}.xml"
                if before["app_id"]:
                    tony(env, "advise", before["app_id"], "--write", written)
                after = run_once(env, name, written, f"{tmp}/{name}-after") if Path(written).exists() else None
                results["examples"][name] = {"before": before, "after": after}
                print(f"[advice] {name}: {len(before.get('findings') or [])} finding(s); rerun "
                      f"{'exit ' + str(after['exit_code']) if after else 'not run'}", file=sys.stderr, flush=True)
    finally:
        launcher.down(purge=True)
    results["summary"] = {name: {"requested_mb": [requested_mb(e["before"]), requested_mb(e["after"])],
                                 "used_mb": [used_mb(e["before"]), used_mb(e["after"])]}
                          for name, e in results["examples"].items() if e["after"] and "types" in e["after"]}
    text = json.dumps(results, indent=1)
    print(text)
    if opts.out:
        Path(opts.out).write_text(text + "\n")
    done = [e for e in results["examples"].values() if e["after"]]
    return 0 if done and all(e["before"]["exit_code"] == 0 and e["after"]["exit_code"] == 0 for e in done) else 1


if __name__ == "__main__":
    sys.exit(main())
