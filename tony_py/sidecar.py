"""The sidecar TensorBoard task (TonY's sidecar_tensorboard.py): `python -m tony_py.sidecar`.

Serves $TB_LOG_DIR on $TB_PORT, bound to this node's address (not a wildcard address), with the
TensorBoard of the job's own Python environment. A log dir on a Hadoop file system (hdfs://,
gs://, ...) is mirrored to a local directory by a small JVM (io.tonypy.sidecar.LogDirMirror,
with the cluster's Hadoop classpath), so it works whatever file systems TensorBoard supports.
The task is untracked: the AM stops it when training ends, and its failure never fails the job.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from urllib.parse import urlparse

from tony_py.task import record

MIRROR_CLASS = "io.tonypy.sidecar.LogDirMirror"
MIRROR_INTERVAL_MS = "2000"


def local_log_dir(log_dir: str) -> tuple[str, subprocess.Popen | None]:
    """A local directory TensorBoard can read: the log dir itself, or a live mirror of it."""
    scheme = urlparse(log_dir).scheme
    if scheme in ("", "file"):
        return urlparse(log_dir).path if scheme else log_dir, None
    classpath = os.environ.get("TONY_HADOOP_CLASSPATH")
    java = os.path.join(os.environ.get("JAVA_HOME", ""), "bin", "java")
    if not classpath or not os.path.exists(java):
        raise SystemExit(f"TB_LOG_DIR {log_dir}: mirroring a {scheme}:// log dir needs Java and the Hadoop classpath "
                         "in the container (JAVA_HOME, and the cluster's yarn.application.classpath)")
    mirror = tempfile.mkdtemp(prefix="tensorboard-logs-", dir=os.getcwd())
    proc = subprocess.Popen([java, "-Xmx128m", "-cp", classpath, MIRROR_CLASS, log_dir, mirror, MIRROR_INTERVAL_MS])
    return mirror, proc


@record
def main() -> int:
    log_dir, port = os.environ.get("TB_LOG_DIR"), os.environ.get("TB_PORT")
    if not log_dir or not port:
        raise SystemExit("the TensorBoard sidecar needs TB_LOG_DIR and TB_PORT (set by TonY-py)")
    try:
        from tensorboard import main as tensorboard_main
    except ImportError:
        raise SystemExit(f"TensorBoard is not installed in the job's Python environment ({sys.executable}): "
                         "add the tensorboard package to the venv") from None
    served, mirror = local_log_dir(log_dir)
    host = socket.gethostbyname(os.environ.get("NM_HOST") or socket.getfqdn())
    print(f"TensorBoard: {log_dir} (served from {served}) on http://{host}:{port}", flush=True)
    sys.argv = ["tensorboard", "--logdir", served, "--port", port, "--host", host]
    try:
        return tensorboard_main.run_main() or 0
    finally:
        if mirror is not None:
            mirror.terminate()
            shutil.rmtree(served, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
