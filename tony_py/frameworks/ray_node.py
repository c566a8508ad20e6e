"""A Ray node in a TonY-py task: `python -m tony_py.frameworks.ray_node` with the job's own
interpreter (frameworks.launch puts it in place of the task's command).

Head: reserve the node's ports, run `ray start --head --block` (again, on the same ports, when
it failed within EARLY_FAILURE_S: Ray's fixed 30 s for a raylet to register is too short for a
busy host), wait until every worker node has joined (bounded: the error names the ones that did not), publish the dashboard's address
(the task's callback file, shown on the AM page), run the task's command as the Ray driver with
RAY_ADDRESS, stop the node, and exit with the driver's exit code. Worker: reserve the ports and
run `ray start --address <head> --block` until the AM stops the task.

`ray stop` would stop every Ray node of the user on the host, other jobs' included; instead this
process is a child subreaper, so every process the node starts stays below it (Ray's agents
outlive a killed raylet, re-parented), and whatever is still below it once `ray start` ended
is killed. They also stay in the task's process group, which the executor kills should this
process die first. Standard library only, but for `wait`, which imports ray.
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
from tony_py.task import write_error

JOIN_TIMEOUT = "TONY_RAY_JOIN_TIMEOUT_S"
AGENT_TIMEOUT_MS = 120_000
DEFAULT_JOIN_TIMEOUT_S = 300.0
START_ATTEMPTS = 6  # (bounded by the join timeout: a loaded node may miss Ray's 30 s window more than twice)
EARLY_FAILURE_S = 90.0  # a `ray start` that ends sooner failed to start the node
STOP_GRACE_S = 0.5  # the executor's SIGKILL follows its SIGTERM after 2 s


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


def become_subreaper() -> None:
    """Ray's processes that lose their parent (its agents outlive a killed raylet) are
    re-parented to this process rather than to init, so stop() still finds them."""
    import ctypes

    PR_SET_CHILD_SUBREAPER = 36
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        log("could not become a child subreaper: Ray processes that lose their parent are left to the "
            "executor's process-group kill")


def descendants(root: int) -> list[int]:
    """Every process below root (by /proc's parent links)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def kill_descendants(within_s: float = 1.5) -> int:
    """SIGKILL whatever runs below this process, again until nothing is left (a dying raylet may
    still fork a worker, which is then re-parented here), and reap it; how many were killed."""
    killed: set[int] = set()
    deadline = time.monotonic() + within_s
    while True:
        found = [pid for pid in descendants(os.getpid()) if pid not in killed]
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        killed.update(found)
        try:
            while os.waitpid(-1, os.WNOHANG) != (0, 0):
                pass
        except ChildProcessError:
            pass
        if not descendants(os.getpid()) or time.monotonic() > deadline:
            return len(killed)
        time.sleep(0.05)


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
        self.proc = subprocess.Popen([sys.executable, "-m", "ray.scripts.scripts", "start", *args], env=ray_env)

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
                attempt, started = attempt + 1, time.monotonic()
                node.start(again=True)
                continue
            return fail(f"Ray's head node ended (exit code {code}) before the workers joined"
                        f"{f' ({attempt} starts)' if attempt > 1 else ''}; Ray's output is in this task's stdout "
                        "and stderr")
        if waiter is None and listening(node.env[plan.HEAD_ADDRESS]):
            waiter = subprocess.Popen([sys.executable, "-m", plan.RUNNER, "wait"], env=node.env)
        if not published and listening(url):
            publish_dashboard(url)
            published = True
        time.sleep(0.2)
    if waiter.returncode != 0:
        if not published:  # the AM starts the workers once the head announced its dashboard
            log(f"Ray's dashboard never answered at {url}, and worker nodes start only after it does: "
                "see the dashboard's log in this task's tony-ray/ directory")
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


def run_worker(node: Node, deadline: float) -> int:
    """Join the head once its GCS answers. `ray start` gives a node 30 s to register, which a
    node busy starting several Ray nodes at once can miss: a start that fails that early is
    tried again while the head's join timeout lasts (the head's start likewise: run_head)."""
    head = node.env[plan.HEAD_ADDRESS]
    while not listening(head):
        if time.monotonic() > deadline:
            return fail(f"Ray's head at {head} did not answer")
        time.sleep(0.5)
    for attempt in range(1, START_ATTEMPTS + 1):
        started = time.monotonic()
        node.start()
        code = exit_status(node.proc.wait())
        early = time.monotonic() - started < EARLY_FAILURE_S
        if code == 0 or not early or attempt == START_ATTEMPTS or time.monotonic() > deadline:
            break
        log(f"Ray's worker node failed to start (exit code {code}); trying again")
        node.stop()
    log(f"Ray's worker node ended with exit code {code}")
    return code


def wait_for_workers(env: dict[str, str]) -> int:
    """In a process of its own (`... ray_node wait`): connect to the head as a Ray driver and
    wait until every expected worker node is alive. 0, or 1 naming the ones missing."""
    import ray

    expected = plan.expected_workers(env)
    timeout = join_timeout(env)
    deadline = time.monotonic() + timeout
    while True:
        try:
            ray.init(address=env[plan.HEAD_ADDRESS], logging_level="ERROR", log_to_driver=False)
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
    become_subreaper()
    try:
        if node.role == plan.HEAD_TYPE:
            node.start()
            code = run_head(node)
        else:
            code = run_worker(node, time.monotonic() + join_timeout(env))
    finally:
        node.stop()
    if code < 0:  # the driver died of a signal: so does this process, so the job sees the signal
        signal.signal(-code, signal.SIG_DFL)  # (tony.application.retry-on-signal decides, as for any task)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
