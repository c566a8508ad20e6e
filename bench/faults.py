"""Faults on real wires, measured (JSON on stdout): what each fault costs a job, next to the time
YARN itself needs to call a node or an AM lost on the same cluster.

Each scenario runs the fault tests' job (tests/integration/multihost/faultjob.py: three workers
of jobs/stepper.py that take 0.2 s steps and checkpoint to HDFS every CKPT_EVERY steps, each
step signed with the process that took it) on a 3-NodeManager Docker cluster, strikes a worker's
node (or the AM's, or the DataNode) in mid-training, undoes the fault, and reads every step written:

  detected_s          the fault until the AM decided to restart the gang (or, when the AM's node
                      was struck, until the next AM attempt took the job over)
  all_training_s      the fault until every task stepped again in a copy started after it
  longest_stall_s     the longest pause between two steps of any task after the fault
  cut_off_stopped_s   the fault until the last step of a copy the fault cut off (fencing: at most
                      the executor's lease, 10 s by default, for the node's own copies)
  steps_redone        steps taken twice (lost work: a restarted copy redoes what followed its last
                      checkpoint, fewer than CKPT_EVERY steps per task)
  restarts            gang restarts spent, from either budget
  infra_restarts      of those, the infrastructure's (tony.application.max-infrastructure-restarts:
                      YARN reported the containers lost, or they ended while no AM ran)
  split_brain         pairs of live copies of one task that both decided to write (must be 0)
  late_landings       writes an older copy decided before its successor started, landing after
                      (in flight when a node froze; the stepper's checkpoint is fenced by attempt)
  packets_dropped     (packet loss) what the node's DROP rules dropped, per direction: a loss
                      that dropped nothing fails the scenario instead of measuring nothing

The baseline is YARN's own verdict on the same cluster: its NodeManager expiry (30 s here, 10 min
by default) and AM expiry (15 s here), and, for the killed node, when the ResourceManager actually
reported it LOST.
Usage: bench/faults.py [--only NAME,...] [--workdir DIR]   (starts and stops its own cluster;
needs a Docker engine: scripts/docker-engine)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration")]

from multihost.faultjob import CKPT_EVERY, LEASE_S, StepperJob, am_address, host_of, resumed_at  # noqa: E402
from stepper import late_landings, split_brain, writers  # noqa: E402
from support import Cluster, wait_for  # noqa: E402
from tony_py.cluster.docker import DockerCluster  # noqa: E402
from tony_py.cluster.faults import Faults  # noqa: E402


class Scenario:
    """One fault: how to strike it, when to undo it, what it should cost."""

    def __init__(self, name: str, strike, undo, restarts: int = 1, steps: int = 150, wait_resume: bool = True):
        self.name, self.strike, self.undo = name, strike, undo
        self.restarts, self.steps, self.wait_resume = restarts, steps, wait_resume


def scenarios(cluster: Cluster, faults: Faults) -> list[Scenario]:
    """Each strike takes the job and returns (the daemon struck, the hosts whose copies it cut off)."""

    def whole_node(action):
        def strike(job):
            _, daemon = job.victim()
            action(daemon)
            return daemon, {host_of(cluster, daemon)}
        return strike

    def frozen_past_lease(job, daemon, fault_at):
        time.sleep(max(0.0, fault_at + 2 * LEASE_S - time.time()))
        faults.thaw(daemon)

    def am_node(job):
        daemon = job.am_daemon()
        faults.partition(daemon)
        return daemon, None

    def from_masters(job):
        _, daemon = job.victim()
        for master in ("resourcemanager", "namenode"):
            faults.cut(daemon, master)
        return daemon, {host_of(cluster, daemon)}

    def am_port(job):
        _, daemon = job.victim()
        host, port = am_address(cluster, job)
        faults.cut(daemon, faults.address(cluster.daemon_on(host)), port=port)
        return daemon, {host_of(cluster, daemon)}

    def lossy(job):
        _, daemon = job.victim()
        faults.lose_packets(daemon, 0.30)
        return daemon, set()

    def lossy_undo(job, daemon, fault_at):
        time.sleep(max(0.0, fault_at + 20 - time.time()))
        dropped = faults.dropped(daemon)  # (before the flush takes the rules and their counters)
        faults.uncut(daemon)
        if not (dropped["INPUT"] and dropped["OUTPUT"]):
            raise RuntimeError(f"30 % loss on {daemon} dropped no packet one way: {dropped}")
        return {"packets_dropped": dropped}

    def datanode(job):
        faults.partition("datanode")
        return "datanode", set()

    def after(seconds, action):
        def undo(job, daemon, fault_at):
            time.sleep(max(0.0, fault_at + seconds - time.time()))
            action(daemon)
        return undo

    return [
        Scenario("worker_node_partitioned", whole_node(faults.partition), lambda j, d, t: faults.heal(d)),
        Scenario("worker_node_frozen", whole_node(faults.freeze), frozen_past_lease),
        Scenario("worker_node_killed", whole_node(faults.kill), lambda j, d, t: faults.restart(d)),
        Scenario("am_node_partitioned", am_node, lambda j, d, t: faults.heal(d), steps=200),
        Scenario("node_cut_from_rm_and_nn", from_masters, lambda j, d, t: faults.uncut(d), steps=250),
        Scenario("am_port_dropped_on_a_node", am_port, lambda j, d, t: faults.uncut(d)),
        Scenario("packet_loss_30pct", lossy, lossy_undo, restarts=0, steps=120, wait_resume=False),
        Scenario("datanode_partitioned_20s", datanode, after(20, faults.heal), restarts=0, steps=200,
                 wait_resume=False),
    ]


class NodeLostWatch:
    """When the ResourceManager reports a node LOST (polled from another thread)."""

    def __init__(self, cluster: Cluster, host: str, since: float, timeout: float = 120.0):
        self.at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(cluster, host, since + timeout), daemon=True)
        self._thread.start()

    def _run(self, cluster, host, deadline):
        while not self._stop.is_set() and time.time() < deadline and self.at is None:
            try:
                lost = requests.get(f"{cluster.rm_web}/ws/v1/cluster/nodes", params={"states": "LOST"}, timeout=5)
                if any(n["nodeHostName"] == host for n in ((lost.json().get("nodes") or {}).get("node") or [])):
                    self.at = time.time()
            except Exception:  # noqa: BLE001 - the RM may be busy; poll again
                pass
            time.sleep(0.25)

    def stop(self):
        self._stop.set()
        self._thread.join(5)


def longest_stall(steps: list[dict], after: float) -> float:
    """The longest pause between two consecutive steps of one task, among steps after `after`
    (the pause that spans the fault counts)."""
    worst = 0.0
    for task in {s["task"] for s in steps}:
        times = sorted(s["t"] for s in steps if s["task"] == task)
        for a, b in zip(times, times[1:]):
            if b > after:
                worst = max(worst, b - a)
    return worst


def detected(history: dict, fault_at: float) -> float | None:
    kinds = ("RESTART_DECIDED", "AM_FAILOVER")
    times = [e["ts"] for e in history["events"] if e["kind"] in kinds and e["ts"] > fault_at]
    return round(min(times) - fault_at, 2) if times else None


def run_one(cluster: Cluster, faults: Faults, scenario: Scenario) -> dict:
    job = StepperJob(cluster, f"bench-{scenario.name}-{int(time.time())}", steps=scenario.steps)
    job.wait_training()
    fault_at = time.time()
    daemon, cut_hosts = scenario.strike(job)
    watch = NodeLostWatch(cluster, host_of(cluster, daemon), fault_at) \
        if scenario.name == "worker_node_killed" else None
    try:
        if scenario.wait_resume:
            wait_for(lambda: len({w.task for ws in writers(job.steps()).values() for w in ws if w.first > fault_at})
                     == job.workers, 240, "every task to step again")
        if watch:  # a killed node comes back only once YARN called it lost (or gave up waiting)
            wait_for(lambda: watch.at or time.time() > fault_at + 120, 130, "YARN to call the node lost")
        extra = scenario.undo(job, daemon, fault_at) or {}
        run = job.finish(timeout=400)
    finally:
        if faults.damage():
            faults.repair()
        if watch:
            watch.stop()
    steps = job.steps()
    history = job.history()
    cut_off = [w for ws in writers(steps).values() for w in ws
               if w.first < fault_at and (cut_hosts is None or w.host in cut_hosts)] if cut_hosts != set() else []
    taken = [(s["task"], s["step"]) for s in steps]
    out = {
        "final_status": "SUCCEEDED" if run.rc == 0 else f"exit {run.rc}",
        "detected_s": detected(history, fault_at),
        "all_training_s": round(resumed_at(job, fault_at) - fault_at, 2) if scenario.wait_resume else None,
        "longest_stall_s": round(longest_stall(steps, fault_at), 2),
        "cut_off_stopped_s": round(max(w.last for w in cut_off) - fault_at, 2) if cut_off else None,
        "steps_redone": len(taken) - len(set(taken)),
        "restarts": history["restarts_used"] + history["infra_restarts_used"],
        "infra_restarts": history["infra_restarts_used"],
        "restarts_expected": scenario.restarts,
        "am_attempts": history["am_attempts"],
        "split_brain": len(split_brain(steps)),
        "late_landings": len(late_landings(steps)),
        "app_id": job.app_id,
        **extra,
    }
    if watch:
        out["yarn_node_lost_s"] = round(watch.at - fault_at, 2) if watch.at else None
    return out


# The YARN verdict each fault is compared with: the AM's node is YARN's AM expiry; a node cut from
# the ResourceManager only is detected by YARN's own NodeManager expiry (nothing else sees it).
YARN_BASELINE = {"am_node_partitioned": "am_expiry_s"}


def summarize(results: dict) -> None:
    """Per scenario, the detection time next to YARN's own verdict on the same cluster."""
    for name, r in results["scenarios"].items():
        if r.get("detected_s") is None:
            continue
        baseline = results["baseline_yarn"][YARN_BASELINE.get(name, "nm_expiry_s")]
        r["detected_vs_yarn"] = round(r["detected_s"] / baseline, 3)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated scenario names")
    parser.add_argument("--workdir", default=str(ROOT / ".bench-docker-cluster"))
    opts = parser.parse_args()
    launcher = DockerCluster(opts.workdir)
    launcher.down(purge=True)
    state, _ = launcher.up(nodes=3, timeout=300, log=lambda line: print(line, file=sys.stderr))
    cluster = Cluster("docker", Path(state.conf_dir), state.rm_web, state.nn_web, Path(state.lib_dir),
                      Path(opts.workdir), state.nodemanagers, launcher=launcher)
    timers = launcher.status()["yarn_timers_ms"]
    results = {"benchmark": "faults", "cpu_count": os.cpu_count(),
               "job": f"jobs/stepper.py, 3 workers, 0.2 s steps, a checkpoint to HDFS every {CKPT_EVERY} steps",
               "lease_s": LEASE_S,
               "baseline_yarn": {"nm_expiry_s": timers["nm_expiry_ms"] / 1000,
                                 "am_expiry_s": timers["am_expiry_ms"] / 1000,
                                 "nm_expiry_default_s": 600, "am_expiry_default_s": 600},
               "scenarios": {}}
    wanted = {n for n in opts.only.split(",") if n}
    faults = Faults(launcher)
    try:
        for scenario in scenarios(cluster, faults):
            if wanted and scenario.name not in wanted:
                continue
            print(f"[faults] {scenario.name}", file=sys.stderr)
            try:
                results["scenarios"][scenario.name] = run_one(cluster, faults, scenario)
            except Exception as exc:  # noqa: BLE001 - one scenario's failure is a result too
                results["scenarios"][scenario.name] = {"error": str(exc)[-2000:]}
            print(json.dumps(results["scenarios"][scenario.name]), file=sys.stderr)
    finally:
        done = [r for r in results["scenarios"].values() if "error" not in r]
        results["split_brain_total"] = sum(r["split_brain"] for r in done)
        results["restarts_as_expected"] = all(r["restarts"] == r["restarts_expected"] for r in done)
        clean = len(done) == len(results["scenarios"]) and results["restarts_as_expected"] \
            and not results["split_brain_total"]
        launcher.down(purge=clean)
        if not clean:
            print(f"[faults] logs kept in {opts.workdir}", file=sys.stderr)
    summarize(results)
    print(json.dumps(results, indent=2))
    return 0 if results["split_brain_total"] == 0 and len(done) == len(results["scenarios"]) else 1


if __name__ == "__main__":
    sys.exit(main())
