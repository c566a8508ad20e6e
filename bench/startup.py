"""Startup timeline of a TonY-py job, phase by phase, for 2 and 4 workers (JSON on stdout).

Each run submits a job whose tasks exit at once, so the numbers are TonY-py + YARN overhead,
not training. Phases (seconds since the client's submit call):
  rm_accepted        the RM recorded the application (YARN app report start time)
  am_container_launched  the NM launched the AM container (app report launch time)
  am_started         the Python AM is up (after the AM JVM started it)
  am_registered      the AM registered with the RM
  first/all_containers_allocated, all_containers_started (NM started them)
  first/all_executors_registered, first_spec_served, first/all_tasks_started (user processes)
  verdict, done
Usage: bench/startup.py [--workers 2 4] [--repeat 2] [--workdir DIR]
Uses the cluster at $HADOOP_CONF_DIR, or starts a local one in --workdir (and stops it after).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py.bridge.gateway import ClientGateway  # noqa: E402
from tony_py.client.flags import parse_args  # noqa: E402
from tony_py.client.job import FINAL_STATES  # noqa: E402
from tony_py.client.prepare import prepare  # noqa: E402
from tony_py.client.submission import Submission  # noqa: E402
from tony_py.cluster import LocalCluster  # noqa: E402

TASK = "import os; print('task', os.environ['JOB_NAME'], os.environ['TASK_INDEX'])\n"


def run_once(gw: ClientGateway, workers: int, src: Path) -> dict:
    args = parse_args([
        "--src_dir", str(src), "--executes", "task.py", "--python_binary_path", "python3",
        "--conf", f"tony.worker.instances={workers}", "--conf", "tony.worker.memory=512m",
        "--conf", "tony.am.memory=512m", "--conf", "tony.application.name=bench-startup", "--quiet",
    ])
    sub = Submission(gw, prepare(args))
    t0 = time.time()
    job = sub.submit()
    status = {}
    while job.refresh().get("state") not in FINAL_STATES:
        status = job.am_status or status
        time.sleep(0.2)
    if job.report.get("final_status") != "SUCCEEDED":
        raise RuntimeError(f"bench job failed: {job.report.get('diagnostics', '')[-2000:]}")
    job.cleanup()
    report = job.report
    status = job.am_status or status
    phases = {"rm_accepted": report["start_time"] / 1000 - t0}
    if report.get("launch_time"):
        phases["am_container_launched"] = report["launch_time"] / 1000 - t0
    for name, when in sorted(status.get("timeline", {}).items(), key=lambda kv: kv[1]):
        phases[name] = when - t0
    phases["client_saw_finish"] = report["finish_time"] / 1000 - t0
    rss = [t["metrics"].get("executor_max_rss_bytes") for t in status.get("tasks", []) if t.get("metrics")]
    return {
        "app_id": job.app_id,
        "phases_s": {k: round(v, 3) for k, v in phases.items()},
        "executor_max_rss_mb": round(max(rss) / 2**20, 1) if rss else None,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workdir", default=str(ROOT / ".bench-cluster"))
    opts = parser.parse_args()

    started_cluster = None
    if not os.environ.get("HADOOP_CONF_DIR"):
        started_cluster = LocalCluster(opts.workdir)
        state, _ = started_cluster.up()
        os.environ["HADOOP_CONF_DIR"] = state.conf_dir
    results = {"benchmark": "startup", "runs": {}}
    try:
        with tempfile.TemporaryDirectory() as tmp, ClientGateway() as gw:
            (Path(tmp) / "task.py").write_text(TASK)
            run_once(gw, 1, Path(tmp))  # warm-up: uploads the runtime and jar to the cache
            for workers in opts.workers:
                runs = [run_once(gw, workers, Path(tmp)) for _ in range(opts.repeat)]
                keys = runs[0]["phases_s"].keys()
                results["runs"][f"{workers}_workers"] = {
                    "median_s": {k: round(statistics.median(r["phases_s"].get(k, float("nan")) for r in runs), 3)
                                 for k in keys},
                    "each": runs,
                }
    finally:
        if started_cluster is not None:
            started_cluster.down(purge=True)
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
