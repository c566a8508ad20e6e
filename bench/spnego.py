"""What SPNEGO costs a REST call (JSON on stdout): the ResourceManager's /ws/v1/cluster/apps
asked three ways, alternating in rounds so the machine's noise falls on all alike:

  plain_reused   the insecure process cluster's RM through one requests.Session (the baseline
                 of a poller: one kept-alive connection)
  spnego_reused  the secure process cluster's RM (web UIs behind SPNEGO) through one
                 spnego.Session, as `tony logs -f` and the Airflow trigger poll: it negotiates
                 once, then its hadoop.auth cookie carries it
  plain_fresh    the insecure RM, a new connection per call (requests.get: the baseline of a
                 one-off call, as `tony advise` makes)
  spnego_fresh   the secure RM, a new session per call: a 401 round trip and a token made from
                 the ticket cache every time

Also the launchers' `up` of both clusters from stopped (the jars cached), once each.

Usage: bench/spnego.py [--calls 200] [--rounds 5]
Starts both clusters in .bench-spnego-plain and .bench-spnego-secure and takes them down after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py import spnego  # noqa: E402
from tony_py.cluster import LocalCluster  # noqa: E402


def per_call_ms(get, url: str, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        resp = get(url)
        assert resp.status_code == 200, (url, resp.status_code)
    return (time.perf_counter() - started) / calls * 1000


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    plain_cluster = LocalCluster(ROOT / ".bench-spnego-plain")
    secure_cluster = LocalCluster(ROOT / ".bench-spnego-secure")
    up = {}
    try:
        for name, cluster, kerberos in (("plain", plain_cluster, False), ("secure", secure_cluster, True)):
            cluster.down(purge=True)
            started = time.monotonic()
            cluster.up(kerberos=kerberos)
            up[name] = round(time.monotonic() - started, 2)
        info = secure_cluster.status()
        with tempfile.TemporaryDirectory() as tmp:
            ccache = f"FILE:{tmp}/alice.cc"
            subprocess.run(["kinit", "-kt", info["user_keytab"], info["user_principal"]], check=True, timeout=30,
                           env=dict(os.environ, KRB5_CONFIG=info["krb5_conf"], KRB5CCNAME=ccache), capture_output=True)
            plain_url = f"{plain_cluster.load_state().rm_web}/ws/v1/cluster/apps"
            secure_url = f"{secure_cluster.load_state().rm_web}/ws/v1/cluster/apps"
            reused = spnego.session(ccache=ccache, krb5_conf=info["krb5_conf"])
            kept = requests.Session()
            ways = {
                "plain_reused": (lambda url: kept.get(url, timeout=10), plain_url),
                "spnego_reused": (lambda url: reused.get(url, timeout=10), secure_url),
                "plain_fresh": (lambda url: requests.get(url, timeout=10), plain_url),
                "spnego_fresh": (lambda url: spnego.session(ccache=ccache, krb5_conf=info["krb5_conf"]).get(
                    url, timeout=10), secure_url),
            }
            for get, url in ways.values():  # warm: JIT, the first ticket for HTTP/ in the cache
                per_call_ms(get, url, 10)
            samples = {name: [] for name in ways}
            for _ in range(args.rounds):
                for name, (get, url) in ways.items():
                    samples[name].append(round(per_call_ms(get, url, args.calls), 3))
    finally:
        plain_cluster.down(purge=True)
        secure_cluster.down(purge=True)
    medians = {name: statistics.median(values) for name, values in samples.items()}
    result = {
        "calls_per_sample": args.calls, "rounds": args.rounds,
        "per_call_ms": {name: {"median": medians[name], "samples": samples[name]} for name in samples},
        "spnego_over_plain": {"reused": round(medians["spnego_reused"] / medians["plain_reused"], 2),
                              "fresh": round(medians["spnego_fresh"] / medians["plain_fresh"], 2)},
        "up_s": up,
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
