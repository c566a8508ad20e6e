"""`ray start`, waiting for the node's registration as long as Ray's own message says it can.

A `ray start` gives its raylet 30 s to register with the GCS (ray/_private/node.py, a number in
the code), then fails the node with "The current node timed out during startup", after logging
"Try increase the RAY_raylet_start_wait_time_s config", a setting its Python side never reads.
On a host busy with other containers that is too short: in CI (two cores, every test lane at
once) each worker node's start failed that way five times in a row, 43-61 s each, the GCS
itself answering "Deadline Exceeded", and the job failed after the join timeout. Retrying the
whole start (ray_node) pays every process's start-up again and meets the same 30 s.

So the runner starts nodes through this module (`python -m tony_py.frameworks.ray_start start
...`), which gives Ray's registration check (ray._private.services.get_node, which node.py
calls through the module) the rest of RAY_raylet_start_wait_time_s: while it raises Ray's
"not registered yet" RuntimeError, it is asked again, once a second. Where Ray no longer has
that function the start runs unchanged (tests/unit/test_ray_start.py fails first).
"""

from __future__ import annotations

import os
import sys
import time

WAIT_ENV = "RAY_raylet_start_wait_time_s"
RAY_OWN_WAIT_S = 30.0  # node.py's own loop, which follows ours
RETRY_S = 1.0


def patient(get_node, extra_s: float, clock=time.monotonic, sleep=time.sleep):
    """get_node, asked again while it raises RuntimeError, for up to `extra_s` from the first call."""

    def get_node_waiting(*args, **kwargs):
        deadline = clock() + extra_s
        while True:
            try:
                return get_node(*args, **kwargs)
            except RuntimeError:
                if clock() >= deadline:
                    raise
                sleep(RETRY_S)

    get_node_waiting.__wrapped__ = get_node
    return get_node_waiting


def install(env=os.environ) -> bool:
    """Give Ray's registration check the wait WAIT_ENV asks for beyond Ray's own 30 s; False
    where there is nothing to add or Ray has no such check."""
    try:
        wait_s = float(env.get(WAIT_ENV) or 0)
    except ValueError:
        return False
    import ray._private.services as services

    if wait_s <= RAY_OWN_WAIT_S or not callable(getattr(services, "get_node", None)):
        return False
    services.get_node = patient(services.get_node, wait_s - RAY_OWN_WAIT_S)
    return True


def main(argv: list[str]) -> int:
    install()
    from ray.scripts.scripts import main as ray_main

    sys.argv = ["ray", *argv]
    return ray_main()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
