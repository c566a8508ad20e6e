"""A Ray driver for tests/integration/test_ray.py: one remote task pinned to every node of the
cluster reports the container it ran in; the driver writes what it saw to --out, waits for
--wait_for (the test has seen the dashboard link) and exits with --exit_code."""

import argparse
import json
import os
import time

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy


@ray.remote(num_cpus=1)
def where() -> dict:
    return {"container": os.environ.get("CONTAINER_ID"), "node": os.environ.get("TONY_RAY_NODE_NAME"),
            "pid": os.getpid()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--wait_for", default="")
    parser.add_argument("--exit_code", type=int, default=0)
    args = parser.parse_args()
    ray.init()  # RAY_ADDRESS, from TonY-py
    nodes = [n for n in ray.nodes() if n["Alive"]]
    pinned = [where.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
              for n in nodes]
    record = {"driver_container": os.environ.get("CONTAINER_ID"), "RAY_ADDRESS": os.environ.get("RAY_ADDRESS"),
              "RAY_AUTH_MODE": os.environ.get("RAY_AUTH_MODE"),
              "nodes": {n["NodeName"]: {"cpus": n["Resources"].get("CPU"),
                                        "memory": n["Resources"].get("memory"),
                                        "object_store": n["Resources"].get("object_store_memory")} for n in nodes},
              "tasks": ray.get(pinned, timeout=120)}
    ray.shutdown()
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "ray.json"), "w") as f:
        json.dump(record, f)
    deadline = time.monotonic() + 60
    while args.wait_for and not os.path.exists(args.wait_for) and time.monotonic() < deadline:
        time.sleep(0.2)
    print(f"driver done on {len(nodes)} nodes", flush=True)
    return args.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
