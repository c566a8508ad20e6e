"""A Ray node in a TonY-py task: `python -m tony_py.frameworks.ray_node` with the job's own
interpreter (frameworks.launch puts it in place of the task's command).

Head: reserve the node's ports, run `ray start --head --block` (again, on the same ports, when
it failed within EARLY_FAILURE_S: Ray's fixed 30 s for a raylet to register is too short for a
busy host), publish the dashboard's address once the head's node is up (the task's callback
file: the AM page links it, and the AM then starts the workers), wait until every worker node
has joined (bounded: the error names the ones that did not), run the task's command as the Ray
driver with RAY_ADDRESS, stop the node, and exit with the driver's exit code. Worker: reserve
the ports and run `ray start --address <head> --block` until the AM stops the task (run_worker).

`ray stop` would stop every Ray node of the user on the host, other jobs' included; instead this
process is a child subreaper, so every process the node starts stays below it (Ray's agents
outlive a killed raylet, re-parented), and whatever is still below it once `ray start` ended
is killed; `ray start` dies with this process even when it is killed (ray_procs.dies_with).
Standard library only, but for `wait`, which imports ray.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from tony_py.frameworks import ray as plan
from tony_py.frameworks.ray_procs import become_subreaper, descendants, dies_with, kill_descendants  # noqa: F401
from tony_py.task import write_error

JOIN_TIMEOUT = "TONY_RAY_JOIN_TIMEOUT_S"
AGENT_TIMEOUT_MS = 120_000
DEFAULT_JOIN_TIMEOUT_S = 300.0
START_ATTEMPTS = 6  # the head's (a worker's starts are bounded by the join timeout: run_worker)
EARLY_FAILURE_S = 90.0  # a `ray start` that ends sooner failed to start the node
STOP_GRACE_S = 0.5  # the executor's SIGKILL follows its SIGTERM after 2 s
HEAD_UP_FILE = "tony-ray-head-up"  # in the head task's dir: the waiter got in as a driver
HEAD_UP_ENV = "TONY_RAY_HEAD_UP_FILE"  # (the waiter's path to it)

class RayClusterError(Exception):
    """The Ray cluster did not come together: the job's root cause says why."""


def log(message: str) -> None:
    print(f"[tony ray] {message}", file=sys.stderr, flush=True)


def fail(message: str) -> int:
    """Log it and put it in the task's error file (the root cause the AM reports); 1."""
    log(message)
    write_error(RayClusterError(message))
    return 1


def reserve(names, taken=()) -> dict[str, socket.socket]:
    """One bound (not listening) socket per port option, held until `ray start` runs; never one
    of `taken` (the task's own ports, which its executor released for this process to bind, so
    the OS may hand them out again)."""
    socks: dict[str, socket.socket] = {}
    spare = []
    for name in names:
        while True:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("", 0))
            if sock.getsockname()[1] not in taken:
                break
            spare.append(sock)  # held until the others are chosen, so it is not offered again
        socks[name] = sock
    for sock in spare:
        sock.close()
    return socks


def temp_dir(cwd: str) -> tuple[str, str]:
    """(the node's temp dir as Ray is told, the directory to remove). Ray's unix sockets live in
    it and a socket path has at most 107 bytes, which a YARN container's directory alone nearly
    takes; so the files live in the working dir (YARN's disk, removed with the container) and
    Ray is given a short link to them in /tmp."""
    real = os.path.join(cwd, "tony-ray")
    os.makedirs(real, exist_ok=True)
    link_parent = tempfile.mkdtemp(prefix="tony-ray-", dir="/tmp")  # not $TMPDIR: it may be long
    link = os.path.join(link_parent, "t")
    os.symlink(real, link)
    return link, link_parent


def exit_status(code: int) -> int:
    return 128 - code if code < 0 else code


class Driver:
    """The driver process on the head, for the SIGTERM handler. A stop (the AM's, or YARN's
    preemption warning) reaches the whole task's process group, the driver included; Ray's own
    processes then end, but the driver is left running until it ends or the executor's kill
    comes (the preemption deadline), so it can checkpoint."""

    proc: subprocess.Popen | None = None
    terminating = False


class Node:
    def __init__(self, env: dict[str, str]):
        self.env = env
        self.role = env[plan.ROLE]
        self.proc: subprocess.Popen | None = None
        self.link_parent: str | None = None
        self.ports: dict[str, int] = {}

    def start(self, again: bool = False) -> None:
        """`ray start` for this node; `again` after a start that failed: the same ports (the
        dashboard's address may be published already, and the node's own is in the cluster view)."""
        taken = {int(p) for p in (self.env.get(plan.NODE_ADDRESS, "").rpartition(":")[2], self.env.get("TB_PORT"))
                 if p and p.isdigit()}
        socks = {} if again and self.ports else reserve(plan.ports_needed(self.role), taken)
        if socks:
            self.ports = {name: s.getsockname()[1] for name, s in socks.items()}
        tmp, self.link_parent = temp_dir(os.getcwd())
        args = plan.start_args(self.env, self.ports, tmp)
        ray_env = {k: v for k, v in self.env.items() if k not in ("RAY_ADDRESS", plan.DRIVER_COMMAND)}
        # A raylet waits 30 s for its agents (Python processes) to come up, and gives up the
        # node after that: too short on a node busy with other containers' work.
        ray_env.setdefault("RAY_agent_register_timeout_ms", str(AGENT_TIMEOUT_MS))
        log(f"starting Ray's {self.role} node {self.env[plan.NODE_NAME]} at {self.env[plan.NODE_ADDRESS]}")
        for s in socks.values():  # released just before Ray binds them
            s.close()
        self.proc = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", *args], env=ray_env,
                                     preexec_fn=dies_with(os.getpid()))

    def stop(self) -> None:
        """Stop the node: `ray start` first (its node's processes die with it), then whatever
        still runs below this process. The temp dir's link goes first: the executor's SIGKILL
        follows its SIGTERM within 2 s."""
        if self.link_parent:
            shutil.rmtree(self.link_parent, ignore_errors=True)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        killed = kill_descendants()
        if killed:
            log(f"killed {killed} Ray process(es) left behind")


def listening(address: str) -> bool:
    """Whether something accepts connections at host:port (or http://host:port)."""
    host, _, port = address.rpartition("/")[2].rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=0.2):
            return True
    except OSError:
        return False


def publish_dashboard(url: str) -> None:
    """The task's callback file: the executor reports it to the AM, whose page links it."""
    path = os.environ.get("TONY_CALLBACK_FILE")
    if not path:
        return
    with open(f"{path}.tmp", "w") as f:
        json.dump({"dashboard_name": "Ray dashboard", "dashboard_url": url}, f)
    os.replace(f"{path}.tmp", path)
    log(f"Ray dashboard: {url}")


def run_head(node: Node) -> int:
    url = plan.dashboard_url(node.env, node.ports)
    head_up = os.path.abspath(HEAD_UP_FILE)
    waiter: subprocess.Popen | None = None  # started once the GCS answers: it connects as a driver
    published = False
    attempt, started = 1, time.monotonic()
    while waiter is None or waiter.poll() is None:
        if node.proc.poll() is not None:
            if waiter is not None:
                waiter.kill()
                waiter.wait()
                waiter = None
            code = exit_status(node.proc.returncode)
            if time.monotonic() - started < EARLY_FAILURE_S and attempt < START_ATTEMPTS:
                # Ray gives a node's raylet a fixed 30 s to register with the GCS, which a busy
                # host can miss (bench/ray_start.py); the next start usually makes it
                log(f"Ray's head node failed to start (exit code {code}) after {time.monotonic() - started:.0f} s; "
                    f"trying again ({attempt + 1} of {START_ATTEMPTS})")
                node.stop()
                if os.path.exists(head_up):
                    os.remove(head_up)
                attempt, started = attempt + 1, time.monotonic()
                node.start(again=True)
                continue
            return fail(f"Ray's head node ended (exit code {code}) before the workers joined"
                        f"{f' ({attempt} starts)' if attempt > 1 else ''}; Ray's output is in this task's stdout "
                        "and stderr")
        if waiter is None and listening(node.env[plan.HEAD_ADDRESS]):
            waiter = subprocess.Popen([sys.executable, "-m", plan.RUNNER, "wait"],
                                      env={**node.env, HEAD_UP_ENV: head_up})
        # Not before the head's own node is up (the waiter got in as a driver): the dashboard
        # answers first, and a worker node started then found no head node in the GCS and gave
        # up after 40 s, start after start, on a loaded machine
        if not published and os.path.exists(head_up) and listening(url):
            publish_dashboard(url)
            published = True
        time.sleep(0.2)
    if waiter.returncode != 0:
        if not published:  # the AM starts the workers once the head announced its dashboard
            log(f"Ray's dashboard never answered at {url}, or the head's node never took a driver, and worker "
                "nodes start only after both: see the logs in this task's tony-ray/ directory")
        return 1
    if not published and listening(url):
        publish_dashboard(url)
    driver = Driver.proc = subprocess.Popen(["bash", "-c", node.env[plan.DRIVER_COMMAND]],
                                            env={**node.env, "RAY_ADDRESS": node.env[plan.HEAD_ADDRESS]})
    try:
        while driver.poll() is None:
            if node.proc.poll() is not None and not Driver.terminating:
                return fail(f"Ray's head node ended (exit code {node.proc.returncode}) while the driver ran")
            time.sleep(0.2)
    finally:
        Driver.proc = None
        if driver.poll() is None:
            driver.kill()
    log(f"the driver ended with {describe(driver.returncode)}")
    return driver.returncode  # negative: the signal, which main() ends this process with


def describe(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"


def join_timeout(env: dict[str, str]) -> float:
    """TONY_RAY_JOIN_TIMEOUT_S (checked at submit: tony_py/frameworks/ray.py)."""
    return plan.join_timeout(env.get(JOIN_TIMEOUT)) or DEFAULT_JOIN_TIMEOUT_S


def run_worker(node: Node, join_timeout_s: float) -> int:
    """Join the head once its GCS answers, and stay joined until the AM stops this task.

    A node that ends while the head's GCS still answers failed. One that failed to start (within
    EARLY_FAILURE_S) is started again until the join timeout has passed since this task's first
    start: Ray gives a node fixed windows to come up (a raylet gave up on its dashboard agent's
    port after 17 s here, and `ray start` waits 30 s for the raylet to register), which a loaded
    host can miss start after start (five in a row here), and the head, which began waiting
    before any worker could start, has by then failed the job naming the nodes that did not
    join. A cap of six starts instead made the worker's own exit 1 the job's verdict (CI, 292 s
    into a loaded run). A node that fails later ends the task with its exit code, for the job to
    judge. A node that ended with the head's GCS gone is not this task's failure: the head's
    node ended with the driver (the head's result is the job's, and the AM stops this task once
    it has it), or the head is starting its node again, which this node then joins."""
    head = node.env[plan.HEAD_ADDRESS]
    first_start = None
    while True:
        since = time.monotonic()
        while not listening(head):
            if time.monotonic() - since > join_timeout_s:
                return fail(f"Ray's head at {head} did not answer for {join_timeout_s:.0f} s ({JOIN_TIMEOUT})")
            time.sleep(0.5)
        started = time.monotonic()
        first_start = first_start or started
        node.start()
        code = exit_status(node.proc.wait())
        node.stop()
        if not listening(head):
            log(f"Ray's worker node ended (exit code {code}) after the head's GCS at {head} went away: waiting for "
                "the head to start again, or for the AM to stop this task")
            continue
        ended = time.monotonic()
        if code == 0 or ended - started >= EARLY_FAILURE_S or ended - first_start > join_timeout_s:
            log(f"Ray's worker node ended with exit code {code}")
            return code
        log(f"Ray's worker node failed to start (exit code {code}) after {ended - started:.0f} s; trying again")


def wait_for_workers(env: dict[str, str]) -> int:
    """In a process of its own (`... ray_node wait`): connect to the head as a Ray driver, which
    only a head whose own node is up takes, say so (the file HEAD_UP_ENV names), and wait until
    every expected worker node is alive. 0, or 1 naming the ones missing."""
    import ray

    expected = plan.expected_workers(env)
    timeout = join_timeout(env)
    deadline = time.monotonic() + timeout
    while True:
        try:
            ray.init(address=env[plan.HEAD_ADDRESS], logging_level="ERROR", log_to_driver=False)
            if env.get(HEAD_UP_ENV):
                open(env[HEAD_UP_ENV], "w").close()
            break
        except Exception as exc:  # noqa: BLE001 - whatever Ray raises while the head is not up yet
            if time.monotonic() > deadline:
                return fail(f"could not reach Ray's head at {env[plan.HEAD_ADDRESS]}: {exc}")
            time.sleep(0.5)
    try:
        while True:
            alive = {n.get("NodeName") for n in ray.nodes() if n.get("Alive")}
            missing = [name for name in expected if name not in alive]
            if not missing:
                log(f"all {len(expected)} Ray worker node(s) joined")
                return 0
            if time.monotonic() > deadline:
                return fail(f"Ray worker node(s) did not join the head within {timeout:.0f} s "
                            f"({JOIN_TIMEOUT}): " + ", ".join(f"{name} ({expected[name]})" for name in missing))
            time.sleep(0.3)
    finally:
        ray.shutdown()


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    if argv[1:] == ["wait"]:
        return wait_for_workers(env)
    node = Node(env)

    def on_sigterm(*_):
        if Driver.proc is not None and Driver.proc.poll() is None:
            Driver.terminating = True  # the driver got the group's SIGTERM too: it is its to handle
            return
        raise SystemExit(143)

    signal.signal(signal.SIGTERM, on_sigterm)
    if not become_subreaper():
        log("could not become a child subreaper: Ray processes that lose their parent are left to the "
            "executor's process-group kill")
    try:
        if node.role == plan.HEAD_TYPE:
            node.start()
            code = run_head(node)
        else:
            code = run_worker(node, join_timeout(env))
    finally:
        node.stop()
    if code < 0:  # the driver died of a signal: so does this process, so the job sees the signal
        signal.signal(-code, signal.SIG_DFL)  # (tony.application.retry-on-signal decides, as for any task)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
