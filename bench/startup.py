"""Startup of a TonY-py job next to YARN's own floor, on the same local cluster in one run (JSON
on stdout, a short table on stderr).

For each worker count, runs alternate (floor, TonY-py, floor, TonY-py, …) so noise hits both,
each once the run before it is cleaned up (its logs aggregated):
  floor   YARN's distributed shell (its Java client and AM, Hadoop's own) starting N containers
          that print the time: `floor_all_running_s` is the last of them, from the command's start.
  TonY-py `python -m tony_py.submit` with N workers whose user process records the time as its
          first act: `all_running_s`, from the command's start. Both ask for 128 MB containers
          (TonY-py's AM 512 MB, distributed shell's 512 MB) and both commands are new processes,
          so both pay their client's start.
`overhead_s` = all_running_s - floor_all_running_s is what TonY-py itself costs. Its timeline
(seconds since the command started) accounts for the rest:
  imports_done  validated  jvm_started  hadoop_client_ready  cluster_checked
  application_created  staged  submitted                       the client (TONY_CLIENT_TIMELINE)
  rm_accepted  am_container_launched                           YARN's application report
  am_started  am_registered                                    the AM's log
  first/all_executors_registered                               the executors' logs
  first/all_running  exit                                      the user processes, the command

Usage: bench/startup.py [--workers 2 4 8 16] [--runs 3] [--workdir DIR] [--no-recovery]
Starts a local cluster in --workdir (default .bench-cluster) unless one runs there; leaves it up.
--no-recovery starts it without RM and NodeManager recovery (every local cluster runs with them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py.bridge import jvm  # noqa: E402
from tony_py.timeline import ENV as TIMELINE_ENV  # noqa: E402
from tony_py.cluster import LocalCluster  # noqa: E402
from tony_py.cluster.jars import distributedshell_jar  # noqa: E402

TASK = """import os, sys, time
started = time.time()
with open(os.path.join(sys.argv[1], os.environ["JOB_NAME"] + "-" + os.environ["TASK_INDEX"]), "w") as f:
    f.write(repr(started))
"""
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO (.*)$", re.M)


def _log_times(text: str, needle: str) -> list[float]:
    """Epoch seconds of the log lines (Python logging's local-time format) containing needle."""
    return [datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            for stamp, message in LOG_TIME.findall(text) if needle in message]


def _app(rm_web: str, app_id: str) -> dict:
    return requests.get(f"{rm_web}/ws/v1/cluster/apps/{app_id}", timeout=10).json()["app"]


def settle(rm_web: str, app_id: str, timeout: float = 60.0) -> None:
    """Until the finished run's NodeManagers are done with it (its logs aggregated into HDFS),
    so the next run, floor or TonY-py, starts on a quiet cluster rather than beside the last
    one's clean-up."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _app(rm_web, app_id).get("logAggregationStatus") in ("SUCCEEDED", "FAILED", "TIME_OUT", "DISABLED"):
            break
        time.sleep(0.2)
    time.sleep(0.5)


def _container_dirs(workdir: Path, app_id: str) -> list[Path]:
    return sorted(workdir.glob(f"data/nm*/logs/{app_id}/container_*"))


def am_phases(workdir: Path, app_id: str, t0: float) -> dict[str, float]:
    """am_started and am_registered (seconds after t0), from the AM's log."""
    phases = {}
    for d in _container_dirs(workdir, app_id):
        if (d / "am.log").exists():
            text = (d / "am.log").read_text(errors="replace")
            for name, needle in (("am_started", "AM for "), ("am_registered", "registered with the RM")):
                times = _log_times(text, needle)
                if times:
                    phases[name] = times[0] - t0
    return phases


def run_floor(state, workdir: Path, workers: int, shell_jar: Path | None = None) -> dict:
    """YARN's distributed shell starting `workers` containers (shell_jar: another release's own)."""
    shell_jar = shell_jar or distributedshell_jar(Path(state.lib_dir))
    classpath = f"{state.conf_dir}:{shell_jar}:{state.lib_dir}/*"  # the given shell first, before the lib's
    cmd = [jvm.java_executable(), "-Xmx256m", *jvm.FAST_START_OPTS, *jvm.JDK17_OPENS,
           "-cp", classpath, "org.apache.hadoop.yarn.applications.distributedshell.Client",
           "-jar", str(shell_jar), "-master_memory", "512",
           "-num_containers", str(workers), "-container_memory", "128", "-shell_command", "date +%s.%N"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    done = time.time()
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 or "Application completed successfully" not in output:
        raise RuntimeError(f"distributed shell failed ({proc.returncode}): {output[-2000:]}")
    app_id = re.search(r"application_\d+_\d+", output).group(0)
    starts = [float(p.read_text()) for d in _container_dirs(workdir, app_id)
              for p in [d / "stdout"] if p.exists() and p.read_text().strip()]
    if len(starts) != workers:
        raise RuntimeError(f"distributed shell: {len(starts)} of {workers} containers reported a time")
    return {"app_id": app_id, "all_running_s": round(max(starts) - t0, 3), "exit_s": round(done - t0, 3)}


def run_tony(state, workdir: Path, workers: int, tmp: Path, index: int, memory: str = "128m") -> dict:
    out = tmp / f"tony-{workers}-{index}"
    out.mkdir()
    marks = tmp / f"timeline-{workers}-{index}.jsonl"
    env = {**os.environ, "HADOOP_CONF_DIR": state.conf_dir, TIMELINE_ENV: str(marks)}
    env.pop("TONY_CONF_DIR", None)
    cmd = [sys.executable, "-m", "tony_py.submit", "--quiet", "--src_dir", str(tmp / "src"), "--executes", "task.py",
           "--task_params", str(out), "--python_binary_path", sys.executable,
           "--conf", f"tony.worker.instances={workers}", "--conf", f"tony.worker.memory={memory}",
           "--conf", "tony.am.memory=512m", "--conf", "tony.application.name=bench-startup"]
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env, cwd=ROOT)
    done = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"tony submit failed ({proc.returncode}): {proc.stderr[-2000:]}")
    phases = {m["phase"]: m["t"] - t0 for m in map(json.loads, marks.read_text().splitlines())}
    app_id = re.search(r"application_\d+_\d+", proc.stdout + proc.stderr).group(0)
    app = _app(state.rm_web, app_id)
    phases["rm_accepted"] = app["startedTime"] / 1000 - t0
    if app.get("launchTime"):
        phases["am_container_launched"] = app["launchTime"] / 1000 - t0
    phases.update(am_phases(workdir, app_id, t0))
    executors = []
    for d in _container_dirs(workdir, app_id):
        if (d / "executor.log").exists():
            executors += _log_times((d / "executor.log").read_text(errors="replace"), "registered ")[:1]
    if executors:
        phases["first_executor_registered"] = min(executors) - t0
        phases["all_executors_registered"] = max(executors) - t0
    starts = [float(p.read_text()) for p in out.iterdir()]
    if len(starts) != workers:
        raise RuntimeError(f"tony: {len(starts)} of {workers} user processes recorded a start")
    phases["first_running"] = min(starts) - t0
    phases["all_running"] = max(starts) - t0
    phases["exit"] = done - t0
    return {"app_id": app_id, "all_running_s": round(phases["all_running"], 3),
            "phases_s": {k: round(v, 3) for k, v in sorted(phases.items(), key=lambda kv: kv[1])}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8, 16])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=str(ROOT / ".bench-cluster"))
    parser.add_argument("--no-recovery", action="store_true",
                        help="start the cluster without RM and NodeManager recovery (what recovery costs a start)")
    opts = parser.parse_args()
    workdir = Path(opts.workdir).resolve()
    state, _ = LocalCluster(workdir).up(recovery=not opts.no_recovery)
    results = {"benchmark": "startup", "cpu_count": os.cpu_count(), "runs": opts.runs,
               "recovery": not opts.no_recovery, "results": []}
    with tempfile.TemporaryDirectory(prefix="tony-bench-startup-") as tmp:
        tmp = Path(tmp)
        (tmp / "src").mkdir()
        (tmp / "src" / "task.py").write_text(TASK)
        # Warm-up: the runtime and jar land in every NodeManager's cache, as after any earlier job
        # of this version (8 GB workers on 12 GB nodes: one per node). Measured runs then pay
        # only what every job pays (its own files come from the AM: no localizer runs).
        settle(state.rm_web, run_tony(state, workdir, 2, tmp, -1, memory="8g")["app_id"])
        for workers in opts.workers:
            floors, tonys = [], []
            for i in range(opts.runs):
                floors.append(run_floor(state, workdir, workers))
                settle(state.rm_web, floors[-1]["app_id"])
                tonys.append(run_tony(state, workdir, workers, tmp, i))
                settle(state.rm_web, tonys[-1]["app_id"])
            phase_names = list(tonys[0]["phases_s"])
            row = {
                "workers": workers,
                "floor_all_running_s": round(statistics.median(f["all_running_s"] for f in floors), 3),
                "all_running_s": round(statistics.median(t["all_running_s"] for t in tonys), 3),
                "floor_exit_s": round(statistics.median(f["exit_s"] for f in floors), 3),
                "phases_median_s": {k: round(statistics.median(t["phases_s"][k] for t in tonys if k in t["phases_s"]), 3)
                                    for k in phase_names},
                "each": {"floor": floors, "tony": tonys},
            }
            row["overhead_s"] = round(row["all_running_s"] - row["floor_all_running_s"], 3)
            row["ratio"] = round(row["all_running_s"] / row["floor_all_running_s"], 2)
            results["results"].append(row)
    print(json.dumps(results, indent=2))
    print(f"{'workers':>7} {'floor s':>8} {'tony-py s':>9} {'overhead s':>10} {'ratio':>6}", file=sys.stderr)
    for r in results["results"]:
        print(f"{r['workers']:>7} {r['floor_all_running_s']:>8} {r['all_running_s']:>9} {r['overhead_s']:>10} "
              f"{r['ratio']:>6}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
