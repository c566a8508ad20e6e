"""Two ResourceManagers and their ZooKeeper under running jobs: fail-over, fail-back, a fail-over
during the submit and while the job waits for containers, ZooKeeper down for 30 s, every
NodeManager restarted in turn, and a client whose first configured RM is the standby. Each job
steps on through it untouched (maintenance.survival_problems: one AM attempt, no gang restart,
the same container and pid per task, its steps 1..N once each, the client never killing)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import requests

from support import history_of, wait_for
from tony_py.cluster import availability
from tony_py.config.xmlconf import read_xml, to_xml

from ha.conftest import active_rm_daemon, wait_for_rms
from ha.maintenance import SteppingJob, am_attempts, survival_problems


def active_now(launcher) -> str | None:
    """The active RM's daemon name right now, None while none is."""
    states = availability.ha_states(launcher.load_state().rm_webs)
    return next((availability.rm_daemon(rm) for rm, s in states.items() if s == "ACTIVE"), None)


def standby_again(launcher, daemon: str) -> None:
    """Start a killed RM again and wait until it serves as the standby."""
    launcher.restart_daemon(daemon)
    rm_id = "rm" + daemon.removeprefix("resourcemanager")
    wait_for_rms(launcher, lambda: availability.ha_states(launcher.load_state().rm_webs)[rm_id] == "STANDBY",
                 f"{rm_id} to be the standby")


def fail_over(launcher) -> tuple[str, str]:
    """Kill the active RM and wait for the other to take over: (killed, new active)."""
    killed = active_rm_daemon(launcher)
    launcher.kill_daemon(killed)
    taken_over = wait_for_rms(launcher, lambda: (d := active_now(launcher)) not in (None, killed) and d,
                              "the other ResourceManager to take over")
    return killed, taken_over


def reconnects(app_id: str, cluster) -> list[str]:
    return [e["message"] for e in history_of(cluster, app_id)["events"] if e["kind"] == "RM_RECONNECTED"]


def test_a_running_job_rides_through_a_failover_and_the_failback(cluster, launcher, both_rms_back, tmp_path):
    job = SteppingJob(cluster, tmp_path / "job", steps=600, step_time=0.1)
    job.wait_stepping(5)
    first, second = fail_over(launcher)
    job.wait_stepping(10)  # training goes on under the other RM
    standby_again(launcher, first)
    launcher.kill_daemon(second)  # the fail-back
    wait_for_rms(launcher, lambda: active_now(launcher) == first, "the fail-back")
    job.wait_stepping(10)
    run = job.finish(timeout=300)
    assert survival_problems(cluster, job, run) == []
    # the AM told each outage it rode through, with its length, to the history
    assert len(reconnects(run.app_id, cluster)) >= 2, history_of(cluster, run.app_id)["events"][-20:]


def test_failovers_during_the_submit_and_while_allocating_cost_nothing(cluster, launcher, both_rms_back, tmp_path):
    """A holder job takes both GPUs; the next job asks for them too, so it waits ALLOCATING. The
    active RM dies as that job's client starts, so its whole submission (the cluster checks,
    the new application, the submit) meets the fail-over, and its successor dies while the job
    waits: YARN's client retries on the other RM, AMRMClient re-sends the outstanding requests,
    and both jobs finish untouched."""
    holder = SteppingJob(cluster, tmp_path / "holder", "tony.worker.gpus=1", steps=900, step_time=0.1)
    holder.wait_stepping(5)
    killed = active_rm_daemon(launcher)
    waiter = SteppingJob(cluster, tmp_path / "waiter", "tony.worker.gpus=1", steps=50, step_time=0.1)
    launcher.kill_daemon(killed)  # the client's JVM is still starting: its first RM call comes after
    killed_at = time.time()
    second = wait_for_rms(launcher, lambda: (d := active_now(launcher)) not in (None, killed) and d,
                          "the other ResourceManager to take over")
    first = killed
    try:
        wait_for(lambda: waiter.app_id and (cluster.am_status(waiter.app_id) or {}).get("state") == "ALLOCATING",
                 180, "the second job to wait for its GPUs")
    except AssertionError as exc:
        waiter.job.proc.poll()
        raise AssertionError(f"{exc}; its client (exit {waiter.job.proc.returncode}) said: "
                             f"{''.join(waiter.job.out)[-3000:]} {waiter.job.err[-2000:]}") from None
    standby_again(launcher, first)
    launcher.kill_daemon(second)  # while it waits
    wait_for_rms(launcher, lambda: active_now(launcher) == first, "the fail-back")
    held, waited = holder.finish(timeout=300), waiter.finish(timeout=300)
    assert survival_problems(cluster, holder, held) == []
    assert survival_problems(cluster, waiter, waited) == []
    # the submission reached YARN only after the kill: it went through the fail-over
    assert cluster.app(waited.app_id)["startedTime"] / 1000 > killed_at


def test_zookeeper_down_for_30_s_costs_a_running_job_nothing(cluster, launcher, both_rms_back, tmp_path):
    job = SteppingJob(cluster, tmp_path / "job", steps=700, step_time=0.1)
    job.wait_stepping(5)
    launcher.kill_daemon("zookeeper")
    time.sleep(30)
    launcher.restart_daemon("zookeeper")
    run = job.finish(timeout=300)
    assert survival_problems(cluster, job, run) == []


def test_every_nodemanager_restarted_in_turn_costs_a_running_job_nothing(cluster, launcher, tmp_path):
    """An upgrade's rolling restart: each NodeManager stopped hard and started again (same host,
    same ports); with recovery it takes its running containers back, the AM's included. The next
    one is stopped only once the RM reports this one RUNNING, heard from its new process (a health
    report made after the kill), with the containers it had. Whether it came back within YARN's
    node expiry is not assumed but checked: the RM never marked any of them LOST (its own log),
    and a failure says how long the node was away against the expiry."""
    expiry_s = int(read_xml(cluster.conf_dir / "yarn-site.xml")["yarn.nm.liveness-monitor.expiry-interval-ms"]) / 1000
    logs_before = {log: log.stat().st_size for log in rm_logs(launcher)}
    job = SteppingJob(cluster, tmp_path / "job", steps=500, step_time=0.1)
    job.wait_stepping(5)
    for nm in launcher.load_state().nodemanagers:
        name, node_id = f"nodemanager{nm['index']}", node_of(cluster, nm)["id"]
        containers = running_containers(nm, job.app_id)
        launcher.kill_daemon(name)
        killed_at = time.time()
        launcher.restart_daemon(name)

        def back_with_its_containers():
            node = node_of(cluster, nm)
            return (node["state"] == "RUNNING" and node["lastHealthUpdate"] / 1000 > killed_at
                    and node["numContainers"] == len(containers) and running_containers(nm, job.app_id) == containers
                    and node)

        def lost():
            return [line for line in rm_log_lines(logs_before) if f"{node_id} Node Transitioned from RUNNING to LOST"
                    in line]

        wait_for(back_with_its_containers, 120, f"the RM to report the restarted {name} RUNNING with its "
                 f"{len(containers)} container(s)", explain=lambda: (
                     f"the RM: {node_of(cluster, nm)}; the NodeManager runs {running_containers(nm, job.app_id)} "
                     f"of {containers}; the RM's LOST lines (expiry {expiry_s:.0f} s): {lost()}"))
        away_s = time.time() - killed_at  # (to the RM's report: within the polling's quarter second)
        assert not lost(), f"{name} was away {away_s:.0f} s, past YARN's {expiry_s:.0f} s node expiry: {lost()}"
        print(f"[rolling restart] {name}: RUNNING again, with its {len(containers)} container(s), in the RM's "
              f"report {away_s:.1f} s after the kill (node expiry {expiry_s:.0f} s)")
        job.wait_stepping(5)
    run = job.finish(timeout=300)
    assert survival_problems(cluster, job, run) == []
    assert [line for line in rm_log_lines(logs_before) if "Node Transitioned from RUNNING to LOST" in line] == []


def node_of(cluster, nm: dict) -> dict:
    """The RM's report of a NodeManager of the launcher's plan (by its web port)."""
    return next(n for n in cluster.nodes() if n["nodeHTTPAddress"].endswith(f":{nm['nm_web_port']}"))


def running_containers(nm: dict, app_id: str) -> set[str]:
    """The application's containers a NodeManager itself reports running."""
    listed = requests.get(f"http://127.0.0.1:{nm['nm_web_port']}/ws/v1/node/containers",
                          headers={"Accept": "application/json"}, timeout=10).json()["containers"] or {}
    ours = f"_{app_id.removeprefix('application_')}_"  # container_[e<epoch>_]<cluster ts>_<app number>_…
    found = listed.get("container", [])
    return {c["id"] for c in (found if isinstance(found, list) else [found])  # (one is not listed as a list)
            if ours in c["id"] and c["state"] == "RUNNING"}


def rm_logs(launcher) -> list[Path]:
    return [Path(d.log) for d in launcher.load_state().daemons if d.name.startswith("resourcemanager")]


def rm_log_lines(sizes_before: dict[Path, int]) -> list[str]:
    """What both ResourceManagers logged since the sizes were taken."""
    lines = []
    for log, size in sizes_before.items():
        with open(log, errors="replace") as f:
            f.seek(size)
            lines += f.read().splitlines()
    return lines


def test_a_client_whose_first_rm_is_the_standby_submits_and_follows(cluster, launcher, tony, probe_args, tmp_path):
    webs = launcher.load_state().rm_webs
    standby = wait_for(lambda: next((rm for rm, s in availability.ha_states(webs).items() if s == "STANDBY"), None),
                       120, "a standby ResourceManager")
    conf = tmp_path / "conf"
    shutil.copytree(cluster.conf_dir, conf)
    site = read_xml(conf / "yarn-site.xml")
    ids = site["yarn.resourcemanager.ha.rm-ids"].split(",")
    site["yarn.resourcemanager.ha.rm-ids"] = ",".join([standby] + [i for i in ids if i != standby])
    (conf / "yarn-site.xml").write_text(to_xml(site))
    run = tony(*probe_args("tony.worker.instances=1", "tony.worker.memory=512m"), env={"HADOOP_CONF_DIR": str(conf)})
    assert run.rc == 0, run.output[-3000:]
    assert "finished: SUCCEEDED" in run.stdout
    assert am_attempts(cluster, run.app_id) == 1
