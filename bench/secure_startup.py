"""Start-up on the secure local cluster: a job submitted with a ticket cache next to the same job
submitted with --principal/--keytab (whose AM renews tokens), alternating in one run, and what
the job's own files cost there (JSON on stdout, a short table on stderr).

Per run (seconds from the command's start): the client's timeline (TONY_CLIENT_TIMELINE),
am_started and am_registered (the AM's log), all_running (the user processes), exit. Per task container, from the NodeManagers' logs: how long
it sat in LOCALIZING. On a Kerberos cluster the job's spec, tony-final.xml and src_dir are
localized by YARN (on an insecure one the AM serves them, and task containers go through
LOCALIZING in milliseconds); serving them there would take a TLS listener per AM attempt, whose
key comes from the JDK's keytool: `keytool_s` is that cost, timed here on the same machine.

Usage: bench/secure_startup.py [--workers 4] [--runs 3] [--workdir DIR]
Starts a secure local cluster in --workdir (default .bench-secure-cluster) unless one runs there;
leaves it up.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from startup import TASK, am_phases  # noqa: E402
from tony_py.bridge import jvm  # noqa: E402
from tony_py.cluster import LocalCluster, secure  # noqa: E402
from tony_py.timeline import ENV as TIMELINE_ENV  # noqa: E402

NM_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*Container (container_\S+) transitioned from "
                     r"(\w+) to (\w+)", re.M)


def localizing_s(workdir: Path, app_id: str) -> dict[str, float]:
    """{container id: seconds from NEW->LOCALIZING to LOCALIZING->SCHEDULED}, task containers."""
    began, ended = {}, {}
    for log in workdir.glob("logs/nodemanager*.log"):
        for stamp, container, old, new in NM_TIME.findall(log.read_text(errors="replace")):
            if app_id.removeprefix("application_") not in container or container.endswith("_000001"):
                continue
            at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if new == "LOCALIZING":
                began[container] = at
            elif old == "LOCALIZING":
                ended[container] = at
    return {c: round(ended[c] - began[c], 3) for c in began if c in ended}


def run(state, workdir: Path, tmp: Path, env: dict, extra: list[str], workers: int, index: int) -> dict:
    out = tmp / f"run-{index}"
    out.mkdir()
    cmd = [sys.executable, "-m", "tony_py.submit", "--quiet", "--src_dir", str(tmp / "src"), "--executes", "task.py",
           "--task_params", str(out), "--python_binary_path", sys.executable, *extra,
           "--conf", f"tony.worker.instances={workers}", "--conf", "tony.worker.memory=256m",
           "--conf", "tony.am.memory=512m", "--conf", "tony.application.name=bench-secure-startup"]
    marks = tmp / f"timeline-{index}.jsonl"
    t0 = time.time()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**env, TIMELINE_ENV: str(marks)},
                          cwd=ROOT)
    done = time.time()
    if proc.returncode != 0:
        raise RuntimeError(f"tony submit failed ({proc.returncode}): {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
    app_id = re.search(r"application_\d+_\d+", proc.stdout + proc.stderr).group(0)
    phases = {m["phase"]: round(m["t"] - t0, 3) for m in map(json.loads, marks.read_text().splitlines())}
    phases.update({name: round(at, 3) for name, at in am_phases(workdir, app_id, t0).items()})
    starts = [float(p.read_text()) for p in out.iterdir()]
    phases["all_running"] = round(max(starts) - t0, 3)
    phases["exit"] = round(done - t0, 3)
    return {"app_id": app_id, "phases_s": phases, "localizing_s": localizing_s(workdir, app_id)}


def keytool_s() -> float:
    """One key and self-signed certificate the way the AM makes its TLS listener's (AmTls.java)."""
    keytool = str(Path(jvm.java_executable()).parent / "keytool")
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        subprocess.run([keytool, "-genkeypair", "-alias", "am", "-keyalg", "EC", "-groupname", "secp256r1",
                        "-dname", "CN=tony-py-am", "-validity", "3650", "-storetype", "PKCS12",
                        "-keystore", f"{tmp}/k.p12", "-storepass", "bench-only"], check=True, capture_output=True)
        return time.perf_counter() - t0


def median(values) -> float:
    values = list(values)
    return round(statistics.median(values), 3) if values else float("nan")


def summary(runs: list[dict]) -> dict:
    phases = {k: median(r["phases_s"][k] for r in runs if k in r["phases_s"]) for k in runs[0]["phases_s"]}
    phases["am_start_to_registered"] = median(r["phases_s"]["am_registered"] - r["phases_s"]["am_started"]
                                              for r in runs)
    waits = [s for r in runs for s in r["localizing_s"].values()]
    return {"phases_median_s": phases, "localizing_median_s": median(waits),
            "localizing_max_s": round(max(waits), 3) if waits else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--workdir", default=str(ROOT / ".bench-secure-cluster"))
    opts = parser.parse_args()
    workdir = Path(opts.workdir).resolve()
    state, _ = LocalCluster(workdir).up(kerberos=True)
    krb = secure.status(state.kerberos)
    results = {"benchmark": "secure_startup", "cpu_count": os.cpu_count(), "runs": opts.runs,
               "workers": opts.workers}
    with tempfile.TemporaryDirectory(prefix="tony-bench-secure-") as tmp:
        tmp = Path(tmp)
        (tmp / "src").mkdir()
        (tmp / "src" / "task.py").write_text(TASK)
        ccache = tmp / "alice.ccache"
        env = {**os.environ, "HADOOP_CONF_DIR": state.conf_dir, "KRB5_CONFIG": krb["krb5_conf"],
               "KRB5CCNAME": f"FILE:{ccache}"}
        env.pop("TONY_CONF_DIR", None)
        env.pop("HADOOP_TOKEN_FILE_LOCATION", None)
        subprocess.run(["kinit", "-kt", krb["user_keytab"], krb["user_principal"]], check=True, env=env)
        keytab = ["--principal", krb["user_principal"], "--keytab", krb["user_keytab"]]
        run(state, workdir, tmp, env, [], opts.workers, -1)  # warm-up: the runtime and jar in every node's cache
        ticket, with_keytab = [], []
        for i in range(opts.runs):
            ticket.append(run(state, workdir, tmp, env, [], opts.workers, 2 * i))
            with_keytab.append(run(state, workdir, tmp, env, keytab, opts.workers, 2 * i + 1))
        results["ticket_cache"] = summary(ticket)
        results["keytab"] = summary(with_keytab)
        results["keytool_s"] = median(keytool_s() for _ in range(opts.runs))
        results["keytab_extra_registration_s"] = round(
            results["keytab"]["phases_median_s"]["am_start_to_registered"]
            - results["ticket_cache"]["phases_median_s"]["am_start_to_registered"], 3)
        results["each"] = {"ticket_cache": ticket, "keytab": with_keytab}
    print(json.dumps(results, indent=2))
    for name in ("ticket_cache", "keytab"):
        r = results[name]
        print(f"{name:>12}: AM start->registered {r['phases_median_s']['am_start_to_registered']} s, "
              f"all running {r['phases_median_s']['all_running']} s, LOCALIZING median {r['localizing_median_s']} s "
              f"(max {r['localizing_max_s']})", file=sys.stderr)
    print(f"keytool (a TLS listener's key): {results['keytool_s']} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
