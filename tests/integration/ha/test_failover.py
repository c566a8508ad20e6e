"""Two ResourceManagers and their ZooKeeper under running jobs: fail-over, fail-back, a fail-over
during the submit and while the job waits for containers, ZooKeeper down for 30 s, every
NodeManager restarted in turn, and a client whose first configured RM is the standby. Each job
steps on through it untouched (maintenance.survival_problems: one AM attempt, no gang restart,
the same container and pid per task, its steps 1..N once each, the client never killing)."""

from __future__ import annotations

import shutil
import time

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
    same ports) within YARN's node expiry; with recovery it takes its running containers back,
    the AM's included."""
    job = SteppingJob(cluster, tmp_path / "job", steps=500, step_time=0.1)
    job.wait_stepping(5)
    for nm in launcher.load_state().nodemanagers:
        name = f"nodemanager{nm['index']}"
        launcher.kill_daemon(name)
        time.sleep(2)
        launcher.restart_daemon(name)
        job.wait_stepping(5)
    run = job.finish(timeout=300)
    assert survival_problems(cluster, job, run) == []


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
