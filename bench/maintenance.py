"""The cluster's own maintenance under a running job, measured (JSON on stdout and in
bench/results/maintenance-2core.json): what each fault an operator causes costs a job on clusters
with recovery (as production runs them), next to the same job and fault on a cluster without it,
where YARN itself ends the job.

The job is the maintenance tests' (tests/integration/ha/maintenance.py: two workers of
jobs/stepper.py, every step signed with the process that took it). Per fault:

  longest_stall_s    the longest pause between two steps of any task (training stalled)
  client_gap_s       the longest time the client could not read YARN's report (its "answers again
                     after N s"; 0 when every read got an answer, however slowly)
  am_attempts        YARN's own count of AM attempts
  restarts           gang restarts, the user's budget and the infrastructure's
  steps_done         how far the slowest task got (1.0: every task took all its steps)
  survived           one AM attempt, no restart, one process per task, steps 1..N, exit 0
  client_exit        the client's exit code
  fault_lasted_s     from the strike until the fault was undone: the daemon started again (for
                     rm_failover only the kill: the other RM takes over by itself)

Faults: rm_failover (the active of an HA pair killed; the other takes over), zookeeper_30s (the
HA pair's ZooKeeper down 30 s), nm_rolling_restart (every NodeManager killed and started again in
turn, 2 s down each), rm_restart (a lone RM killed, started again 25 s later). The baseline runs
nm_rolling_restart and rm_restart on a one-host cluster started without recovery.
Usage: bench/maintenance.py [--only NAME,...]   (starts and stops its own clusters)
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration")]

from ha.maintenance import SteppingJob, am_attempts, longest_stall, survival_problems  # noqa: E402
from support import Cluster, history_of  # noqa: E402
from tony_py.cluster import availability  # noqa: E402
from tony_py.cluster.processes import LocalCluster  # noqa: E402

STEPS, STEP_TIME = 700, 0.1  # 70 s of training: every fault fits inside it


def active_rm(launcher: LocalCluster) -> str:
    states = availability.ha_states(launcher.load_state().rm_webs)
    return availability.rm_daemon(next(rm for rm, s in states.items() if s == "ACTIVE"))


def rm_failover(launcher):
    launcher.kill_daemon(active_rm(launcher))


def zookeeper_30s(launcher):
    launcher.kill_daemon("zookeeper")
    time.sleep(30)
    launcher.restart_daemon("zookeeper")


def nm_rolling_restart(launcher):
    for nm in launcher.load_state().nodemanagers:
        launcher.kill_daemon(f"nodemanager{nm['index']}")
        time.sleep(2)
        launcher.restart_daemon(f"nodemanager{nm['index']}")


def rm_restart(launcher):
    launcher.kill_daemon("resourcemanager")
    time.sleep(25)
    launcher.restart_daemon("resourcemanager")


def handle(launcher: LocalCluster) -> Cluster:
    state = launcher.load_state()
    return Cluster("processes", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir),
                   launcher.workdir, state.nodemanagers, launcher=launcher,
                   rm_webs=list(state.rm_webs.values()) if state.ha else [])


def measure(launcher: LocalCluster, name: str, fault, out_dir: Path) -> dict:
    cluster = handle(launcher)
    job = SteppingJob(cluster, out_dir / name, steps=STEPS, step_time=STEP_TIME)
    job.wait_stepping(10)
    struck = time.time()
    fault(launcher)
    fault_s = time.time() - struck
    run = job.finish(timeout=600)
    for daemon in launcher.load_state().daemons:  # the next fault starts from a whole cluster
        launcher.restart_daemon(daemon.name)
    gaps = [int(g) for g in re.findall(r"the ResourceManager answers again after (\d+) s", run.stdout)]
    last_steps = {}
    for step in job.steps():
        last_steps[step["task"]] = max(last_steps.get(step["task"], 0), step["step"])
    row = {"fault": name, "client_exit": run.rc, "fault_lasted_s": round(fault_s, 1),
           "longest_stall_s": round(longest_stall(job), 2), "client_gap_s": max(gaps, default=0),
           "steps_done": round(min(last_steps.values(), default=0) / STEPS, 2)}
    try:
        row["am_attempts"] = am_attempts(cluster, run.app_id)
        history = history_of(cluster, run.app_id)
        row["restarts"] = {"user": history["restarts_used"], "infrastructure": history["infra_restarts_used"]}
    except Exception as exc:  # noqa: BLE001 - the baseline's YARN may have forgotten the job
        row["am_attempts"] = row["restarts"] = None
        row["note"] = f"{type(exc).__name__}: {str(exc)[:200]}"
    row["survived"] = run.rc == 0 and row["am_attempts"] == 1 and not survival_problems(cluster, job, run)
    said = (run.stderr if run.rc else run.stdout).strip().splitlines() or [""]
    row["client_last_line"] = said[-1][:300]
    print(json.dumps(row), file=sys.stderr, flush=True)
    return row


def on_cluster(workdir: Path, faults: list[tuple[str, object]], **up) -> list[dict]:
    launcher = LocalCluster(workdir)
    launcher.down(purge=True)
    launcher.up(timeout=300, **up)
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="tony-maintenance-") as tmp:
            for name, fault in faults:
                rows.append(measure(launcher, name, fault, Path(tmp)))
    finally:
        launcher.down(purge=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--only", default="", help="comma-separated fault names")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "maintenance-2core.json"))
    args = p.parse_args()
    only = set(filter(None, args.only.split(",")))
    pick = lambda pairs: [(n, f) for n, f in pairs if not only or n in only]  # noqa: E731
    base = ROOT / ".bench-maintenance"
    result = {
        "with_recovery": {
            "ha": on_cluster(base / "ha", pick([("rm_failover", rm_failover), ("zookeeper_30s", zookeeper_30s),
                                                ("nm_rolling_restart", nm_rolling_restart)]), ha=True),
            "lone_rm": on_cluster(base / "lone", pick([("rm_restart", rm_restart)])),
        },
        "baseline_without_recovery": on_cluster(base / "plain", pick([("nm_rolling_restart", nm_rolling_restart),
                                                                      ("rm_restart", rm_restart)]), recovery=False),
        "steps": STEPS, "step_time_s": STEP_TIME,
        "when": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if not only:
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
