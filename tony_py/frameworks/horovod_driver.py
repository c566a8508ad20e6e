"""The Horovod driver task: runs Horovod's gloo rendezvous server for the workers' host plan and
tells TonY-py its port (python -m tony_py.frameworks.horovod_driver; TonY's horovod_driver.py).

The plan comes from CLUSTER_WORKER_LIST (host:slots,…), Horovod's own parse_hosts and
get_host_assignments. The port is written to $TONY_CALLBACK_FILE; the executor reports it to the
AM, which then starts the workers. TonY's test mode (tony.horovod.mode.test) starts no server
and reports port 9999; its fast-fail variant exits 1 at once.

The server listens on this node's address only: Horovod's RendezvousServer.start binds every
address, and its rendezvous, like every framework's own ports, is unauthenticated by design.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import threading
import time

from tony_py.frameworks.horovod import TEST_MODE_PORT
from tony_py.task import record


def report(port: int) -> None:
    path = os.environ["TONY_CALLBACK_FILE"]
    with open(f"{path}.tmp", "w") as f:
        json.dump({"port": port}, f)
    os.replace(f"{path}.tmp", path)


def rendezvous(address: str, workers: str) -> int:
    """Horovod's rendezvous server for the workers' plan, on `address`; its port."""
    try:
        from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
        from horovod.runner.http.http_server import RendezvousHandler, RendezvousHTTPServer
    except ImportError as exc:
        raise SystemExit(f"Horovod is not installed in the job's Python environment ({exc}); install it "
                         "(with gloo) into the venv, or set tony.horovod.mode.test=true to check the set-up")
    hosts = parse_hosts(workers)
    server = RendezvousHTTPServer((address, 0), RendezvousHandler, 1)
    server.init(get_host_assignments(hosts, sum(h.slots for h in hosts)))
    threading.Thread(target=server.serve_forever, name="rendezvous", daemon=True).start()
    return server.server_address[1]


@record
def main() -> int:
    workers = os.environ["CLUSTER_WORKER_LIST"]
    mode = os.environ.get("TONY_HOROVOD_TEST_MODE")
    print(f"horovod driver: workers {workers} ({'test mode ' + mode if mode else 'rendezvous server'})", flush=True)
    if mode == "fast-fail":
        print("tony.horovod.mode.test.fast.fail=true: failing at once", file=sys.stderr, flush=True)
        return 1
    if mode:
        report(TEST_MODE_PORT)
    else:
        port = rendezvous(socket.gethostbyname(os.environ.get("NM_HOST") or socket.getfqdn()), workers)
        report(port)
        print(f"horovod driver: rendezvous server on port {port}", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:  # the driver is untracked: the AM stops it when the workers are done
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
