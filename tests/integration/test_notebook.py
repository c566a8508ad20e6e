"""`tony notebook` as TonY users start it: the jar's NotebookSubmitter under `hadoop jar`, with a
client Python that has nothing installed. JupyterLab runs in a YARN container with a GPU; a real
browser opens it through the client's relay, runs a cell and reads its output; Ctrl-C ends it
with the application KILLED."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import threading
import venv
from pathlib import Path

import requests

from support import PYTHON, ROOT, Browser, screenshot, wait_for
from tony_py import paths
from tony_py.bridge import jvm

PROBE_CELL = ("import os\n"
              "print('container=' + os.environ['CONTAINER_ID'], 'cuda=' + os.environ.get('CUDA_VISIBLE_DEVICES', '-'))")
OPEN_LINE = re.compile(r"notebook: open http://127\.0\.0\.1:(\d+)/lab ")
URL_FILE = re.compile(r"the URL with Jupyter's token is in (\S+) ")
TOKEN = re.compile(r"/lab\?token=([0-9a-f]{64})")


def _notebook_dir(path):
    path.mkdir()
    cell = {"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [],
            "source": PROBE_CELL.splitlines(keepends=True)}
    notebook = {"cells": [cell], "nbformat": 4, "nbformat_minor": 5,
                "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}}}
    (path / "probe.ipynb").write_text(json.dumps(notebook))
    return path


def _hadoop_jar(cluster, tmp_path, *args) -> subprocess.Popen:
    """`hadoop jar tony-py.jar com.linkedin.tony.cli.NotebookSubmitter …`, as the hadoop script execs it."""
    bare = tmp_path / "bare"
    venv.EnvBuilder(with_pip=False).create(bare)  # the jar carries the client and its dependencies
    env = dict(os.environ, TONY_CLIENT_PYTHON=str(bare / "bin" / "python"), TONY_PY_CACHE=str(tmp_path / "cache"),
               CLASSPATH=f"{cluster.conf_dir}:{cluster.lib_dir}/*", HADOOP_CONF_DIR=str(cluster.conf_dir))
    cmd = [jvm.java_executable(), "-Xmx256m", *jvm.JDK17_OPENS, "-Dproc_jar", "org.apache.hadoop.util.RunJar",
           str(paths.locate_jar()), "com.linkedin.tony.cli.NotebookSubmitter", *args]
    stderr = open(tmp_path / "driver.stderr", "w")  # a file: a pipe nobody reads could fill and block it
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=stderr, text=True,
                            start_new_session=True)


def _run_cell_in_browser(port: int, token: str) -> str:
    from playwright.sync_api import TimeoutError as PageTimeout

    with Browser() as browser:
        page = browser.page()
        page.goto(f"http://127.0.0.1:{port}/lab/tree/probe.ipynb?token={token}")
        # the kernel runs in the container: started, connected and idle before the cell is run
        page.get_by_text(re.compile(r"\(ipykernel\) \| Idle")).first.wait_for(timeout=90000)
        output = page.locator(".jp-OutputArea-output", has_text="container=").first
        for _ in range(3):  # a key press while JupyterLab still lays out the page can be lost
            page.locator(".jp-Notebook .jp-Cell .cm-content").first.click()
            page.keyboard.press("Shift+Enter")
            try:
                output.wait_for(timeout=20000)
                break
            except PageTimeout:
                continue
        else:
            raise AssertionError(f"no output from the cell; the page is in {screenshot(page, 'notebook-failed.png')}")
        screenshot(page, "notebook.png")
        return output.inner_text()


def test_notebook_in_a_container_through_the_relay_then_ctrl_c_kills_it(cluster, tmp_path):
    src = _notebook_dir(tmp_path / "notebooks")
    driver = _hadoop_jar(cluster, tmp_path, "--src_dir", str(src), "--python_binary_path", PYTHON,
                         "--conf", "tony.notebook.gpus=1", "--conf", "tony.notebook.memory=1g",
                         "--conf", "tony.am.memory=512m")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(driver.stdout), daemon=True)
    reader.start()
    try:
        try:
            opened = wait_for(lambda: next((m for m in map(OPEN_LINE.search, list(lines)) if m), None)
                              or driver.poll() is not None, 180, "the notebook's URL")
            assert driver.poll() is None, "the client ended"
        except AssertionError as exc:  # the client's own words: why it never said where
            raise AssertionError(f"{exc}; the client said:\n{''.join(lines)[-3000:]}"
                                 f"{(tmp_path / 'driver.stderr').read_text()[-3000:]}") from None
        port = int(opened.group(1))
        said = "".join(lines)
        app_id = re.search(r"submitted (application_\d+_\d+)", said).group(1)
        assert f"ssh -N -L 8888:127.0.0.1:{port} " in said, said
        # stdout is a pipe here (a stored log, maybe): the token is in a private file, not in the output
        url_file = Path(URL_FILE.search(said).group(1))
        assert url_file.stat().st_mode & 0o777 == 0o600
        token = TOKEN.search(url_file.read_text()).group(1)
        assert token not in said
        # never without the token: Jupyter refuses the API and sends the page to its login form
        assert requests.get(f"http://127.0.0.1:{port}/api/status", timeout=10).status_code == 403
        assert requests.get(f"http://127.0.0.1:{port}/api/status", headers={"Authorization": f"token {token}"},
                            timeout=10).status_code == 200

        output = _run_cell_in_browser(port, token)
        container = re.search(r"container=(\S+)", output).group(1)
        cluster_part = app_id.split("_", 1)[1]
        assert container.startswith(f"container_{cluster_part}_01_") and not container.endswith("_000001"), output
        cuda = re.search(r"cuda=(\S+)", output).group(1)
        assert re.fullmatch(r"\d+", cuda), output  # the one GPU the notebook asked for

        # the token is printed for the user, never into the task's logs
        for name in ("stdout", "stderr", "executor"):
            log = subprocess.run([PYTHON, "-m", "tony_py.cli", "logs", app_id, "--task", "notebook:0", "--file", name],
                                 cwd=ROOT, env=cluster.env(), capture_output=True, text=True, timeout=60)
            assert log.returncode == 0, log.stderr[-2000:]
            assert token not in log.stdout
        every = subprocess.run([PYTHON, "-m", "tony_py.cli", "logs", app_id, "--task", "notebook:0"], cwd=ROOT,
                               env=cluster.env(), capture_output=True, text=True, timeout=60)
        assert every.returncode == 0 and "JupyterLab on http://" in every.stdout, every.stderr[-2000:]

        os.killpg(driver.pid, signal.SIGINT)  # a terminal's Ctrl-C
        driver.wait(timeout=90)
    finally:
        if driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
    reader.join(timeout=10)
    assert driver.returncode == 130, "".join(lines)[-3000:] + (tmp_path / "driver.stderr").read_text()[-3000:]
    assert not url_file.exists()  # the token's file goes with the client
    assert f"killing {app_id}" in "".join(lines)
    wait_for(lambda: cluster.app(app_id)["state"] == "KILLED", 60, f"{app_id} to be KILLED")
    with socket.socket() as probe:  # the relay is gone with the client
        assert probe.connect_ex(("127.0.0.1", port)) != 0
