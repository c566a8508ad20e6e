"""From `pip install` of the wheel to a first job SUCCEEDED, as a user on a gateway meets it (JSON
on stdout): the wheel built from this checkout (its size), a fresh venv, `pip install` of the
wheel with pip's cache warm (a second install into another fresh venv: the first fills the cache),
then `tony submit` of a 2-worker job from that venv, elsewhere than the checkout, on a local
cluster (started in --workdir unless one runs there; left up).

Usage: bench/wheel_install.py [--workdir DIR] [--wheel PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py.cluster import LocalCluster  # noqa: E402

TASK = "import os\nprint('worker', os.environ['TASK_INDEX'])\n"


def timed(cmd: list[str], **kwargs) -> float:
    started = time.monotonic()
    subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs)
    return round(time.monotonic() - started, 2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=str(ROOT / ".bench-cluster"))
    parser.add_argument("--wheel", help="a built wheel (default: build one from this checkout)")
    opts = parser.parse_args()
    state, _ = LocalCluster(Path(opts.workdir).resolve()).up()
    with tempfile.TemporaryDirectory(prefix="tony-bench-wheel-") as tmp:
        tmp = Path(tmp)
        wheel = Path(opts.wheel) if opts.wheel else None
        build_s = None
        if wheel is None:
            build_s = timed([str(Path(sys.executable).with_name("uv")), "build", "--wheel", "-o", str(tmp / "dist"),
                             str(ROOT)])
            (wheel,) = (tmp / "dist").glob("tony_py-*.whl")
        installs = []
        for name in ("cold-venv-fills-the-cache", "venv"):
            venv = tmp / name
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            installs.append(timed([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)]))
        (tmp / "job").mkdir()
        (tmp / "job" / "task.py").write_text(TASK)
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "TONY_PY_JAR")}
        env.update(HADOOP_CONF_DIR=state.conf_dir, PATH=f"{venv / 'bin'}:{env.get('PATH', '')}")
        started = time.monotonic()
        job = subprocess.run(["tony", "submit", "--quiet", "--src_dir", str(tmp / "job"), "--executes", "task.py",
                              "--python_binary_path", str(venv / "bin" / "python"),
                              "--conf", "tony.worker.instances=2", "--conf", "tony.worker.memory=256m",
                              "--conf", "tony.am.memory=512m"], cwd=tmp, env=env, capture_output=True, text=True)
        first_job_s = round(time.monotonic() - started, 2)
        if job.returncode != 0:
            raise SystemExit(f"the first job failed ({job.returncode}): {job.stderr[-2000:]}")
        result = {"benchmark": "wheel_install", "cpu_count": os.cpu_count(), "wheel": wheel.name,
                  "wheel_bytes": wheel.stat().st_size, "build_s": build_s,
                  "pip_install_cold_s": installs[0], "pip_install_warm_s": installs[1],
                  "first_job_s": first_job_s, "install_to_succeeded_s": round(installs[1] + first_job_s, 2)}
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
