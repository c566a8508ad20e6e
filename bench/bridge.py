"""The client's JVM bridge: Py4J's gateway process (what TonY-py uses) against JPype's JVM
inside the Python process, side by side on the same local cluster (JSON on stdout).

Each run is a fresh Python process (JPype can start one JVM per process, and both must pay a
cold start) that, from its first line:
  first_call_s  starts the bridge, creates io.tonypy.client.ClientBridge (Hadoop's YarnClient
                and FileSystem) and gets the cluster's nodes back: the first cluster call;
  submit_s      then runs TonY-py's real submission (cluster checks, staging, submit) through
                that bridge, and kills the application again.
Runs alternate (py4j, jpype, py4j, …). The JPype side is a small adapter here with the
ClientGateway interface the submission uses (bridge, fs, call, json); same jar, classpath and
JVM options. Adopt JPype only where it wins by 30 % or more (docs/architecture.md).

Usage: bench/bridge.py [--runs 5] [--workdir DIR]   (needs jpype1: pip install -e .[bench])
"""

from __future__ import annotations

import time

T0 = time.time()  # noqa: E402 - the child's clock starts before any import

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class JPypeGateway:
    """ClientGateway's interface over an in-process JVM (bench only)."""

    def __init__(self, conf_files: list[str], properties: dict[str, str]) -> None:
        import jpype

        from tony_py import paths
        from tony_py.bridge import gateway, jvm

        self.conf_dir = gateway.hadoop_conf_dir()
        classpath = [str(self.conf_dir), *gateway.hadoop_classpath(self.conf_dir), str(paths.locate_jar())]
        opts = [gateway.CLIENT_HEAP, *jvm.FAST_START_OPTS, *jvm.JDK17_OPENS,
                "-Dlog4j.configuration=" + (paths.PACKAGE_DIR / "bridge" / "log4j-client.properties").as_uri()]
        libjvm = str(jvm.java_home() / "lib" / "server" / "libjvm.so")
        jpype.startJVM(libjvm, *opts, classpath=classpath, convertStrings=True)
        files = jpype.JArray(jpype.JString)([str(Path(f).resolve()) for f in conf_files])
        props = gateway.client_properties(self.conf_dir, conf_files, properties)
        self.bridge = jpype.JClass("io.tonypy.client.ClientBridge")(files, json.dumps(props))
        self.fs = self.bridge.fs()

    def call(self, what, fn, *args):
        return fn(*args)

    def json(self, what, fn, *args):
        raw = fn(*args)
        return None if raw is None else json.loads(str(raw))

    def close(self) -> None:
        self.bridge.close()


def child(kind: str, src: Path) -> dict:
    from tony_py.bridge.gateway import ClientGateway
    from tony_py.client.flags import parse_args
    from tony_py.client.prepare import prepare
    from tony_py.client.submission import Submission

    prepared = prepare(parse_args([
        "--src_dir", str(src), "--executes", "task.py", "--python_binary_path", sys.executable, "--quiet",
        "--conf", "tony.worker.instances=1", "--conf", "tony.worker.memory=128m", "--conf", "tony.am.memory=512m"]))
    conf_files = list(prepared.hadoop_conf_files.values())
    if kind == "py4j":
        gw = ClientGateway(conf_files=conf_files, properties=prepared.hadoop_properties)
    else:
        gw = JPypeGateway(conf_files, prepared.hadoop_properties)
    gw.json("nodes", gw.bridge.clusterJson)
    first_call = time.time() - T0
    job = Submission(gw, prepared).submit()
    submitted = time.time() - T0
    job.kill("bench/bridge.py: measured, not run")
    gw.close()
    return {"bridge": kind, "first_call_s": round(first_call, 3), "submit_s": round(submitted, 3)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--workdir", default=str(ROOT / ".bench-cluster"))
    parser.add_argument("--child", choices=("py4j", "jpype"), help=argparse.SUPPRESS)
    parser.add_argument("--src", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(child(opts.child, Path(opts.src))))
        return 0

    from tony_py.cluster import LocalCluster

    state, _ = LocalCluster(Path(opts.workdir).resolve()).up()
    env = {**os.environ, "HADOOP_CONF_DIR": state.conf_dir}
    env.pop("TONY_CONF_DIR", None)
    samples: dict[str, list[dict]] = {"py4j": [], "jpype": []}
    with tempfile.TemporaryDirectory(prefix="tony-bench-bridge-") as tmp:
        (Path(tmp) / "task.py").write_text("print('never runs')\n")
        for i in range(opts.runs + 1):  # the first round warms the cluster's cache and the OS's
            for kind in ("py4j", "jpype"):
                proc = subprocess.run([sys.executable, __file__, "--child", kind, "--src", tmp], env=env,
                                      capture_output=True, text=True, timeout=300)
                if proc.returncode != 0:
                    raise RuntimeError(f"{kind} run failed: {proc.stderr[-2000:]}")
                if i:
                    samples[kind].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    result = {"benchmark": "bridge", "runs": opts.runs, "cpu_count": os.cpu_count()}
    for kind, runs in samples.items():
        result[kind] = {k: round(statistics.median(r[k] for r in runs), 3) for k in ("first_call_s", "submit_s")}
    for k in ("first_call_s", "submit_s"):
        result[f"jpype_over_py4j_{k}"] = round(result["jpype"][k] / result["py4j"][k], 2)
    result["adopt_jpype"] = result["jpype_over_py4j_submit_s"] <= 0.7
    result["each"] = samples
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
