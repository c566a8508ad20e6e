"""What a user meets first on a gateway, against a real cluster's client configuration: a
HADOOP_CONF_DIR whose ResourceManager does not answer, and no Java at all. Each is one line, exit 2,
at once, with nothing created (the leftover check after every test looks at YARN and HDFS).
(A cluster older than TonY-py supports: tests/unit/test_preflight.py; no such cluster starts on
this machine's Java.)"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys

from support import JOBS
from tony_py.config.xmlconf import read_xml, to_xml

ARGS = ["--src_dir", str(JOBS), "--executes", "probe.py", "--python_binary_path", sys.executable]


def submit(env: dict, tmp_path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tony_py.submit", *ARGS], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)


def test_a_conf_dir_whose_resourcemanager_does_not_answer_is_one_line_at_once(cluster, tmp_path):
    conf = tmp_path / "conf"
    shutil.copytree(cluster.conf_dir, conf)
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    site = read_xml(conf / "yarn-site.xml")
    site["yarn.resourcemanager.address"] = dead
    (conf / "yarn-site.xml").write_text(to_xml(site))
    run = submit(cluster.env(HADOOP_CONF_DIR=str(conf)), tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and f"no ResourceManager answers at {dead}" in lines[0], run.stderr


def test_no_java_is_one_line(cluster, tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    env = {k: v for k, v in cluster.env().items() if k != "JAVA_HOME"}
    env["PATH"] = str(bin_dir)  # no java on it; python is run by its full path
    run = submit(env, tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip().count("\n") == 0 and "no Java found" in run.stderr and "JAVA_HOME" in run.stderr
