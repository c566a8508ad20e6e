"""Everything works across hosts, not just on 127.0.0.1: a detached job whose workers land on
three different hosts (a placement constraint), its AM and executors bound to their node's
address, the tracking URL through YARN's proxy, the AM page in a browser, a sidecar TensorBoard
reached from the client's machine, `tony logs` for tasks on other hosts, history; and GPUs
counted per node."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import requests

from support import PYTHON, ROOT, Browser, probe_records, wait_for


def tony_cli(cluster, *args, timeout=120):
    return subprocess.run([PYTHON, "-m", "tony_py.cli", *args], cwd=ROOT, env=cluster.env(), capture_output=True,
                          text=True, timeout=timeout)


def listening(cluster, daemon: str, port: int) -> list[str]:
    """The local addresses a node listens on at this TCP port (from inside the node)."""
    out = cluster.run_on(daemon, "ss", "-Hltn", f"sport = :{port}").stdout
    return [line.split()[3].rsplit(":", 1)[0] for line in out.splitlines() if line.strip()]


def address_of(cluster, daemon: str) -> str:
    return cluster.launcher.load_state().node(daemon).address


def test_a_detached_job_across_three_hosts_and_every_view_of_it(cluster, tony, probe_args, tmp_path):
    shared = cluster.launcher.load_state().shared_dir
    out = f"{shared}/{tmp_path.name}"
    release = f"{out}/release"
    args = probe_args("tony.worker.instances=3", "tony.worker.memory=512m", "tony.tensorboard.memory=1g",
                      "tony.worker.placement-spec=notin,node,worker", params=f"--until-file {release}")
    args[args.index("--task_params") + 1] = f"--out {out}/probe --until-file {release}"
    run = tony(*args, "--sidecar_tensorboard_log_dir", f"{out}/tb", "--detach", timeout=120)
    assert run.rc == 0 and run.app_id, run.output[-3000:]
    app_id = run.stdout.strip().splitlines()[-1]
    assert app_id == run.app_id  # --detach: the id on the last line
    try:
        # the tracking URL, through YARN's web proxy, from this machine: full detail
        proxied = f"{cluster.rm_web}/proxy/{app_id}"
        status = wait_for(lambda: _running_with_tensorboard(proxied), 180, "3 workers and TensorBoard",
                          explain=lambda: _yarn_says(cluster, app_id))
        workers = [t for t in status["tasks"] if t["name"].startswith("worker:")]
        hosts = {t["host"] for t in workers}
        assert len(hosts) == 3, workers  # notin,node,worker: one worker per host
        assert all(h.endswith(".tony.test") for h in hosts)

        # the AM's own port, asked directly from this machine without a signature: states only
        records = {r["JOB_NAME"] + ":" + r["TASK_INDEX"]: r for r in _records(out)}
        am_host, am_port = records["worker:0"]["AM_HOST"], int(records["worker:0"]["AM_PORT"])
        anonymous = requests.get(f"http://{am_host}:{am_port}/status.json", timeout=5).json()
        assert "host" not in json.dumps(anonymous["tasks"]) and len(anonymous["tasks"]) == 4
        # the AM listens on its node's address only, and so does each executor's control endpoint
        am_daemon = cluster.daemon_on(am_host)
        assert listening(cluster, am_daemon, am_port) == [address_of(cluster, am_daemon)]
        logs = cluster.task_logs(app_id)
        for name, record in records.items():
            daemon = cluster.daemon_on(record["NM_HOST"])
            assert record["AM_HOST"] == am_host and record["NM_HOST"] != "localhost", name
            control = re.search(r"control endpoint ([\d.]+):(\d+)", logs[name]["executor.log"])
            assert control.group(1) == address_of(cluster, daemon), name
            assert listening(cluster, daemon, int(control.group(2))) == [address_of(cluster, daemon)], name
        assert {cluster.daemon_on(r["NM_HOST"]) for n, r in records.items() if n.startswith("worker")} \
            == {"nodemanager1", "nodemanager2", "nodemanager3"}

        # TensorBoard (the sidecar, on whichever host YARN gave it) answers this machine
        assert requests.get(status["tensorboard_url"], timeout=10).status_code == 200

        # the AM's page through the proxy, in a real browser
        with Browser() as browser:
            page = browser.page()
            page.goto(proxied + "/")
            page.wait_for_selector("tr[data-task='worker:2']", timeout=15000)
            assert page.locator("tr[data-task]").count() == 4
            assert browser.errors == [], browser.errors

        # tony logs, while running, for a task on a host other than the AM's
        other = next(t["name"] for t in workers if t["host"] != am_host)
        live = tony_cli(cluster, "logs", app_id, "--task", other, "--file", "executor")
        assert live.returncode == 0 and f"executor for {other}" in live.stdout, live.stderr
    finally:
        Path(release).parent.mkdir(parents=True, exist_ok=True)
        Path(release).touch()
    wait_for(lambda: cluster.app(app_id)["state"] == "FINISHED", 120, "the detached job to finish")
    assert cluster.app(app_id)["finalStatus"] == "SUCCEEDED", cluster.app(app_id)["diagnostics"]

    # after the end: logs from YARN's aggregation, and the history, name every host
    done = tony_cli(cluster, "logs", app_id, "--task", "worker:2", "--file", "stdout")
    assert done.returncode == 0 and "probe worker:2 done" in done.stdout, done.stderr
    shown = tony_cli(cluster, "history", "show", app_id, "--json")
    assert shown.returncode == 0, shown.stderr[-2000:]
    shown = json.loads(shown.stdout)
    assert {t["host"] for t in shown["tasks"] if t["name"].startswith("worker")} == hosts


def _running_with_tensorboard(proxied: str) -> dict | None:
    try:
        status = requests.get(f"{proxied}/status.json", timeout=5).json()
    except (requests.RequestException, ValueError):
        return None
    running = [t for t in status.get("tasks", []) if t["state"] == "RUNNING" and t["name"].startswith("worker")]
    return status if len(running) == 3 and status.get("tensorboard_url") else None


def _yarn_says(cluster, app_id: str) -> str:
    """The application as YARN reports it (a job that never ran says why there)."""
    app = cluster.app(app_id)
    return f"YARN: {app.get('state')} {app.get('finalStatus')}: {app.get('diagnostics')}"


def _records(out: str) -> list[dict]:
    return list(probe_records(Path(out)).values())


def test_gpus_are_counted_per_node(cluster, tony, probe_args, tmp_path):
    """Two workers asking for both GPUs of a node land on the two GPU nodes, and each gets its own
    node's devices 0 and 1 (a book kept for the whole cluster would have none left for the second)."""
    shared = cluster.launcher.load_state().shared_dir
    out = f"{shared}/{tmp_path.name}"
    args = probe_args("tony.worker.instances=2", "tony.worker.memory=512m", "tony.worker.gpus=2",
                      "tony.worker.placement-spec=notin,node,worker")
    args[args.index("--task_params") + 1] = f"--out {out}/probe"
    run = tony(*args)
    assert run.rc == 0, run.output[-3000:]
    records = _records(out)
    assert sorted(cluster.daemon_on(r["NM_HOST"]) for r in records) == ["nodemanager1", "nodemanager2"]
    assert [r["all_env"].get("CUDA_VISIBLE_DEVICES") for r in records] == ["0,1", "0,1"]
