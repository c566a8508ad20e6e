"""Ray on YARN: tony.application.framework=ray starts Ray's head node in the head task and a
Ray worker node in each worker task, all on this one host (the local cluster's NodeManagers
share 127.0.0.1), runs the script as the Ray driver on the head, and ends with its exit code."""

import json
from urllib.parse import urlparse

import psutil
import requests

from support import JOBS, PYTHON, wait_for

MB = 1 << 20


def ray_processes(app_id: str) -> list[str]:
    """Processes still running in one of the application's container dirs."""
    out = []
    for proc in psutil.process_iter(["cmdline", "cwd"]):
        try:
            if f"/appcache/{app_id}/" in (proc.info.get("cwd") or ""):
                out.append(f"{proc.pid}: {' '.join(proc.info.get('cmdline') or [])[:100]}")
        except psutil.Error:
            continue
    return out


def test_a_ray_driver_runs_on_the_head_and_its_tasks_on_every_worker_node(tony, cluster, tmp_path):
    out, seen = tmp_path / "out", tmp_path / "dashboard-seen"
    run = tony("--src_dir", str(JOBS), "--executes", "ray_probe.py", "--python_binary_path", PYTHON,
               "--task_params", f"--out {out} --wait_for {seen} --exit_code 3",
               "--conf", "tony.application.framework=ray", "--conf", "tony.am.memory=512m",
               "--conf", "tony.worker.instances=2", "--conf", "tony.head.memory=3g",
               "--conf", "tony.worker.memory=1536m", "--conf", "tony.am.wait-client-signal-stop-timeout-sec=0",
               "--detach")
    assert run.rc == 0, run.output[-3000:]
    app_id = run.app_id
    # the AM page links Ray's dashboard, which answers on the head's own address, once the head's
    # node is up (over 80 s on this machine with several CI lanes running at once; the bound only
    # tells "comes up" from "never does")
    status = wait_for(lambda: (s := cluster.am_status(app_id)) and s.get("dashboards") and s, 150,
                      "the Ray dashboard on the AM's status", explain=lambda: ray_said(cluster, app_id))
    [dashboard] = status["dashboards"]
    assert dashboard["name"] == "Ray dashboard" and dashboard["task"] == "head:0", dashboard
    assert urlparse(dashboard["url"]).hostname == status_host(status, "head:0")
    assert requests.get(dashboard["url"], timeout=10).ok
    # Ray's token authentication is on: its Jobs API (which runs code) refuses a stranger
    assert requests.get(dashboard["url"].rstrip("/") + "/api/jobs/", timeout=10).status_code in (401, 403)
    seen.touch()
    # Worker nodes start once the dashboard is announced; on a loaded machine their starts can miss
    # Ray's fixed windows again and again, for as long as the head waits for them (the join
    # timeout, 300 s): past that, the head's own verdict names the nodes that did not join
    wait_for(lambda: cluster.app(app_id)["state"] == "FINISHED", 330, "the Ray job to finish",
             explain=lambda: ray_said(cluster, app_id))
    app = cluster.app(app_id)
    # the driver's exit code is the job's result, whichever task's end reached the AM first (the
    # worker nodes lose the head's GCS as it stops: that is not theirs to report)
    assert app["finalStatus"] == "FAILED" and "head:0" in app["diagnostics"] and "exit code 3" in app["diagnostics"], \
        f"{app['diagnostics']}\n{ray_said(cluster, app_id)}"
    record = json.loads((out / "ray.json").read_text())
    # one remote task on each of the three Ray nodes, each in its own YARN container
    assert sorted(t["node"] for t in record["tasks"]) == ["head:0", "worker:0", "worker:1"], record
    containers = {t["container"] for t in record["tasks"]}
    assert len(containers) == 3 and all(c.startswith("container_") for c in containers)
    assert record["driver_container"] in containers
    assert record["RAY_ADDRESS"].rpartition(":")[2].isdigit()
    assert record["RAY_AUTH_MODE"] == "token"  # and the driver, with the derived token, got in
    # Ray's view of each node is its container's, not the host's
    head, worker = record["nodes"]["head:0"], record["nodes"]["worker:1"]
    assert head["cpus"] == worker["cpus"] == 1
    assert head["object_store"] == int(3072 * 0.3) * MB and worker["object_store"] == int(1536 * 0.3) * MB
    # nothing of Ray outlives the job
    # (they do end: Ray's daemons notice their raylet or parent gone on their own timers, which a
    # loaded 2-core machine stretched past 30 s once; the bound only tells "ends" from "stays")
    try:
        wait_for(lambda: not ray_processes(app_id), 90, "no process left in the job's containers")
    except AssertionError as exc:
        raise AssertionError(f"{exc}: {ray_processes(app_id)}") from None


def ray_said(cluster, app_id: str) -> str:
    """What each Ray node's runner said (its `[tony ray]` lines), and Ray's last words on the head."""
    if cluster.workdir is None:
        return "(the task logs are read from the process launcher's NodeManager dirs)"
    lines = []
    for task, files in sorted(cluster.task_logs(app_id).items()):
        stderr = files.get("attempt-0.stderr", "")
        said = [line for line in stderr.splitlines() if line.startswith("[tony ray]")]
        lines.append(f"{task}: " + " | ".join(said[-8:]))
        if task == "head:0":
            lines.append("  Ray on the head: " + " | ".join(stderr.splitlines()[-5:])[-1500:])
    return "\n".join(lines)


def status_host(status: dict, task: str) -> str:
    return next(t["host"] for t in status["tasks"] if t["name"] == task)
