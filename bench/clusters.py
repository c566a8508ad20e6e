"""The two local clusters side by side (JSON on stdout): which one should run the integration
suite beyond the multi-host tests?

Both clusters are brought up (the process cluster: every daemon a JVM on 127.0.0.1; the Docker
cluster: every daemon a container of its own, 3 NodeManagers), then the same small job (two
workers of tests/integration/jobs/probe.py on the checkout's Python: what most integration tests
run) is submitted to each in turn, alternating, so the machine's noise falls on both alike:

  up_s          `up` from a stopped cluster (the node image and the jars already built/cached)
  rss_mb        the daemons' resident memory once up
  job_s         wall time of `tony submit` until it exits (median, and each run)
  down_s        `down`
Usage: bench/clusters.py [--runs 5]   (needs a Docker engine: scripts/docker-engine)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py.cluster.docker import DockerCluster  # noqa: E402
from tony_py.cluster.processes import LocalCluster  # noqa: E402

JOBS = ROOT / "tests" / "integration" / "jobs"


def submit(conf_dir: str, out: str) -> float:
    args = ["--src_dir", str(JOBS), "--executes", "probe.py", "--python_binary_path", sys.executable,
            "--task_params", f"--out {out}", "--conf", "tony.worker.instances=2", "--conf", "tony.worker.memory=512m",
            "--conf", "tony.am.memory=512m"]
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "tony_py.submit", *args], cwd=ROOT, capture_output=True, text=True,
                          env=dict(os.environ, HADOOP_CONF_DIR=conf_dir), timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"the job failed on {conf_dir}:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    launchers = {"processes": LocalCluster(ROOT / ".bench-cluster"),
                 "docker": DockerCluster(ROOT / ".bench-docker-cluster")}
    results: dict = {"benchmark": "clusters", "cpu_count": os.cpu_count(), "runs": opts.runs,
                     "job": "probe.py, 2 workers, the checkout's Python", "clusters": {}}
    try:
        for name, launcher in launchers.items():
            launcher.down(purge=True)
            started = time.monotonic()
            state, _ = launcher.up(nodes=3, timeout=300) if name == "docker" else launcher.up(timeout=300)
            # where the probe writes: a Docker NodeManager sees only the cluster's shared dir of this machine
            outputs = getattr(state, "shared_dir", None) or str(launcher.workdir)
            results["clusters"][name] = {"up_s": round(time.monotonic() - started, 2),
                                         "rss_mb": launcher.status().get("daemon_rss_mb", {}).get("total"),
                                         "conf_dir": state.conf_dir, "outputs": outputs, "each_job_s": []}
        for run in range(-1, opts.runs):  # run -1 warms up: a cluster's first JVMs pay for class loading
            for name in launchers:
                r = results["clusters"][name]
                with tempfile.TemporaryDirectory(dir=r["outputs"]) as out:
                    elapsed = submit(r["conf_dir"], out)
                if run >= 0:
                    r["each_job_s"].append(round(elapsed, 2))
    finally:
        for name, launcher in launchers.items():
            started = time.monotonic()
            launcher.down(purge=True)
            if name in results["clusters"]:
                results["clusters"][name]["down_s"] = round(time.monotonic() - started, 2)
    for r in results["clusters"].values():
        r.pop("conf_dir"), r.pop("outputs")
        r["job_s"] = round(statistics.median(r["each_job_s"]), 2)
    p, d = results["clusters"]["processes"], results["clusters"]["docker"]
    results["docker_vs_processes"] = {"up": round(d["up_s"] / p["up_s"], 3), "job": round(d["job_s"] / p["job_s"], 3),
                                      "rss": round(d["rss_mb"] / p["rss_mb"], 3)}
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
