"""How long a Ray head node takes to come up on this machine, idle and with every core busy, with
its Python byte-compiled (a venv used before) and without (a fresh venv, or one shipped without
.pyc files): what Ray's own start timeouts must allow, measured.

    .venv/bin/python bench/ray_start.py [--reps 3] [--loads 0,2,4] [--out bench/results/ray_start-2core.json]

Each start is the node runner's own (tony_py/frameworks/ray_node.py: the same `ray start --head
--block` arguments, ports and environment a head task gets), timed from the command to Ray's
"Ray runtime started" (the raylet registered with the GCS: what `ray start` gives 30 s, a limit
Ray hard-codes), then everything below this process is killed. Cold starts point Python's
byte-code cache (PYTHONPYCACHEPREFIX) at an empty directory, so every Ray process compiles what
it imports, as in a fresh venv. The baseline is the idle, byte-compiled start of the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tony_py.frameworks import ray as plan  # noqa: E402
from tony_py.frameworks import ray_node  # noqa: E402

BUSY = "while True: pass"
GIVE_UP_S = 240.0


def head_env() -> dict[str, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {**os.environ, plan.ROLE: "head", plan.HEAD_ADDRESS: f"127.0.0.1:{port}",
            plan.NODE_ADDRESS: f"127.0.0.1:{port}", plan.NODE_NAME: "head:0", plan.CPUS: "1", plan.GPUS: "0",
            plan.MEMORY_MB: "2048", plan.WORKERS: ""}


def one_start(cold: bool) -> dict:
    env = head_env()
    node = ray_node.Node(env)
    socks = ray_node.reserve(plan.ports_needed("head"))
    node.ports = {name: s.getsockname()[1] for name, s in socks.items()}
    tmp, node.link_parent = ray_node.temp_dir(tempfile.mkdtemp(prefix="ray-start-bench-"))
    ray_env = {k: v for k, v in env.items() if k != "RAY_ADDRESS"}
    ray_env.setdefault("RAY_agent_register_timeout_ms", str(ray_node.AGENT_TIMEOUT_MS))
    cache = tempfile.mkdtemp(prefix="pycache-") if cold else None
    if cache:
        ray_env["PYTHONPYCACHEPREFIX"] = cache
    for s in socks.values():
        s.close()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", *plan.start_args(env, node.ports, tmp)],
                            env=ray_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ready: list[float] = []
    lines: list[str] = []

    def read():
        for line in proc.stdout:
            lines.append(line)
            if "Ray runtime started" in line and not ready:
                ready.append(time.monotonic() - started)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while not ready and proc.poll() is None and time.monotonic() - started < GIVE_UP_S:
        time.sleep(0.1)
    ended = proc.poll()
    node.proc = proc
    node.stop()
    reader.join(timeout=10)
    if cache:
        subprocess.run(["rm", "-rf", cache])
    out = {"ready_s": round(ready[0], 2) if ready else None, "exit_code": ended}
    if not ready:
        out["tail"] = "".join(lines)[-1500:]
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--loads", default="0,2,4", help="busy-loop processes per condition")
    p.add_argument("--out")
    args = p.parse_args()
    ray_node.become_subreaper()
    results = []
    for load in (int(x) for x in args.loads.split(",")):
        busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(load)]
        try:
            for cold in (False, True):
                starts = [one_start(cold) for _ in range(args.reps)]
                times = sorted(s["ready_s"] for s in starts if s["ready_s"] is not None)
                row = {"busy_loops": load, "bytecode": "cold" if cold else "warm", "starts": starts,
                       "failed": sum(s["ready_s"] is None for s in starts),
                       "median_ready_s": times[len(times) // 2] if times else None, "max_ready_s": max(times, default=None)}
                results.append(row)
                print(f"[ray_start] load {load}, {row['bytecode']}: median {row['median_ready_s']} s, "
                      f"max {row['max_ready_s']} s, failed {row['failed']}/{args.reps}", file=sys.stderr, flush=True)
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
    base = next((r["median_ready_s"] for r in results if r["busy_loops"] == 0 and r["bytecode"] == "warm"), None)
    for r in results:
        r["vs_idle_warm"] = round(r["median_ready_s"] / base, 2) if r["median_ready_s"] and base else None
    import ray

    report = {"cpu_count": os.cpu_count(), "ray": ray.__version__, "ray_registration_limit_s": 30,
              "baseline": "idle machine, byte-compiled", "conditions": results}
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
