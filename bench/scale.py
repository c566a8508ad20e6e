"""One AM, many executors: the real Python AM (coordinator, policy, HTTP server, event log and
history writer) driven by simulated executors that speak the real, signed executor API (JSON on
stdout).

The AM runs in a process of its own, so its CPU and memory are its own: YARN is replaced by a
port that grants every container request at once and "starts" each container without running
anything (this machine cannot run 2,000 containers). The executors are asyncio tasks in this
process, each with one keep-alive connection as the real executor keeps: register, long-poll for
the spec, report started, then heartbeat every tony.task.heartbeat-interval-ms with a metrics
payload like a real executor's. Measured per executor count:

  spec_p50_s / spec_all_p99_s  from the last registration to each executor holding its spec
                             (signed bytes as sent: gzipped, as the real executor asks; one in
                             20 is also decompressed and its content checked; the real executor
                             decompresses on its own node, here it would time this process)
  spec_total_mb              bytes of spec answers as sent, all executors together
  am_cpu_cores               the AM's CPU use at steady heartbeat, in cores (0.05 = 5 % of one)
  am_rss_mb                  the AM's resident memory then
  status_json_ms / page_ms   one status.json and one dashboard page at that size
  detection_s                how long a silenced executor had been silent when the AM declared it
                             lost (the AM's clock), next to detection_window_s (interval x
                             tony.task.max-missed-heartbeats); detection_seen_by_client_s adds
                             the time until this process saw it

With --compare-observability each size also runs without metrics and without the job history
(alternating runs), and `observability_cost` gives the difference in AM CPU.

With --client-procs N the simulated executors are spread over N processes (one Python process
cannot keep 10,000 heartbeats a second); heartbeats_per_s is what reached the AM in the steady
window, next to heartbeats_per_s_asked (one per executor per interval).

Usage: bench/scale.py [--executors 200 1000 2000] [--steady-s 20] [--framework tensorflow]
                      [--client-procs 1] [--compare-observability]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tony_py.am.cluster_events import Allocated, Completed, GrantedContainer, Started  # noqa: E402
from tony_py.auth import MAX_ANSWER, RESPONSE_HEADER, Signer, gunzip  # noqa: E402
from tony_py.config.spec import JobSpec  # noqa: E402
from tony_py.net import wire  # noqa: E402

HOST = "127.0.0.1"
# What a real executor's heartbeat carries (tony_py/executor/metrics.py), numbers alike.
METRICS = {"executor_max_rss_bytes": 27_000_000, "task_rss_bytes": 2_100_000_000, "task_cpu_percent": 98.5,
           "MAX_MEMORY_BYTES": 2_200_000_000, "AVG_MEMORY_BYTES": 2_000_000_000, "MAX_CPU_UTILIZATION": 101.0,
           "AVG_CPU_UTILIZATION": 97.0}


# ---- the AM side (a child process) ---------------------------------------------------------------
class LocalDirFs:
    """The FsBridge calls the history writer makes, on a local directory."""

    def __init__(self, root: Path):
        self.root = root

    def _p(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def openAppendLog(self, path):  # noqa: N802 - the Java name
        self._p(path).parent.mkdir(parents=True, exist_ok=True)
        return open(self._p(path), "a")

    def writeText(self, path, text, mode):  # noqa: N802
        self._p(path).parent.mkdir(parents=True, exist_ok=True)
        self._p(path).write_text(text)

    def rename(self, src, dst):
        self._p(dst).parent.mkdir(parents=True, exist_ok=True)
        os.rename(self._p(src), self._p(dst))
        return True


class InstantPort:
    """The coordinator's cluster port: every request granted at once, every launch started."""

    def __init__(self, emit):
        self.emit = emit
        self.seq = 0

    def request(self, request_id, task_type, count):
        for _ in range(count):
            self.seq += 1
            self.emit(Allocated(container=GrantedContainer(
                id=f"container_sim_{self.seq:06d}", node_id=f"node{self.seq % 50}:0",
                host=f"node{self.seq % 50}.example.com", node_http="", resource={},
                allocation_request_id=request_id, priority=request_id)).wire())

    def launch(self, container_id, launch_spec):
        self.emit(Started(container_id=container_id).wire())

    def cancel_requests(self, request_id):
        pass

    def stop(self, container_id):
        self.emit(Completed(container_id=container_id, exit_status=-105, state="COMPLETE", diagnostics="").wire())

    def release(self, container_id):
        pass

    def set_progress(self, progress):
        pass

    def set_heartbeat_interval(self, ms):
        pass

    def blacklist(self, node_id):
        pass

    def unblacklist(self, node_id):
        pass

    def node_count(self):
        return 50  # the simulated nodes above


def am_child(executors: int, framework: str, secret: str, workdir: str, observe: bool = True) -> None:
    from tony_py.am.history import HistoryWriter
    from tony_py.am.launch import JobMeta
    from tony_py.am.runtime import AmRuntime
    from tony_py.config.build import build_job_spec
    from tony_py.config.layers import load_conf

    conf = load_conf(None, [f"tony.worker.instances={executors}", "tony.containers.command=python train.py",
                            f"tony.application.framework={framework}", "tony.worker.memory=256m"],
                     env={}, cwd=Path(workdir))
    spec = build_job_spec(conf)
    meta = JobMeta(app_id="application_1_0001", staging_dir=workdir, user="bench", resources={}, task_resources=[],
                   task_python=sys.executable)
    am = AmRuntime(spec, meta, secret, HOST, HOST)
    if observe:
        history = HistoryWriter(LocalDirFs(Path(workdir)), "/history/intermediate", "/history/finished", meta.app_id, 1)
        am.events.listeners.append(history)
        history.start("<configuration/>")
    coordinator = am.attach(InstantPort(am.queue.put))
    coordinator.start()
    stop = threading.Event()
    threading.Thread(target=am.run, args=(stop,), daemon=True).start()
    while sum(1 for t in coordinator.tasks.values() if t.container is not None) < executors:
        time.sleep(0.05)
    with coordinator.lock:
        assignments = {name: t.container.id for name, t in coordinator.tasks.items()}
    print(json.dumps({"url": am.url, "assignments": assignments}), flush=True)
    sys.stdin.read()  # until the parent closes the pipe


# ---- the executors (this process) -------------------------------------------------------------------
class Connection:
    """One keep-alive HTTP/1.1 connection, as the real executor keeps one (tony_py/auth.py)."""

    def __init__(self, port: int):
        self.port = port
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def call(self, signer: Signer, method: str, target: str, payload: dict | None = None,
                   timeout: float = 60.0, gzip_ok: bool = False) -> tuple[int, bytes]:
        """One signed request; the answer's signature is checked as the real executor checks it
        (over the bytes sent: a gzipped spec is returned as sent, see Executor.run)."""
        body = json.dumps(payload).encode() if payload is not None else b""
        headers, nonce = signer.sign(method, target, body, f"{HOST}:{self.port}")
        head = [f"{method} {target} HTTP/1.1", f"Host: {HOST}:{self.port}", f"Content-Length: {len(body)}",
                *(f"{k}: {v}" for k, v in headers.items()), *(["Accept-Encoding: gzip"] if gzip_ok else [])]
        if payload is not None:
            head.append("Content-Type: application/json")
        if self.streams is None:
            self.streams = await asyncio.open_connection(HOST, self.port)
        reader, writer = self.streams
        try:
            writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            header = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout)
            lines = header.decode("latin-1").split("\r\n")
            fields = {k.lower(): v for k, _, v in (line.partition(": ") for line in lines[1:] if line)}
            data = await reader.readexactly(int(fields.get("content-length", 0)))
        except BaseException:
            self.close()
            raise
        if "close" in fields.get("connection", "").lower():
            self.close()
        status = int(lines[0].split()[1])
        signer.check_answer(nonce, status, data, fields.get(RESPONSE_HEADER.lower()))
        return status, data

    def close(self) -> None:
        if self.streams is not None:
            self.streams[1].close()
            self.streams = None


class Executor:
    def __init__(self, name: str, container: str, secret: str, port: int, heartbeat_s: float, metrics_every: int):
        self.name, self.container, self.port, self.heartbeat_s = name, container, port, heartbeat_s
        self.metrics_every = metrics_every
        self.signer = Signer(secret, container)
        self.conn = Connection(port)
        self.registered_at = self.spec_at = 0.0
        self.spec_bytes = 0
        self.last_beat = 0.0
        self.silenced = False
        self.beats = 0
        self.errors = 0
        self.check_content = hash(name) % 20 == 0
        self.beat_times: list[float] = []  # (CLOCK_MONOTONIC: one clock for every process here)

    def _body(self, request: type[wire.Call], **values) -> dict:
        """What the real executor sends (tony_py/executor/supervisor.py builds the same)."""
        return request(task=self.name, attempt=0, container=self.container, **values).to_body()

    async def run(self, stop: asyncio.Event) -> None:
        await self.conn.call(self.signer, "POST", wire.Register.PATH, self._body(wire.Register, port=20000))
        self.registered_at = time.monotonic()
        poll = wire.SpecPoll(task=self.name, attempt=0, container=self.container, timeout=30.0)
        while True:
            status, data = await self.conn.call(self.signer, poll.METHOD, poll.target(), gzip_ok=True)
            if status == 200:
                break
        self.spec_at, self.spec_bytes = time.monotonic(), len(data)
        if self.check_content:  # (a sample: decompressing every spec would time this process, not the AM)
            spec = json.loads(gunzip(data, MAX_ANSWER) if data[:2] == b"\x1f\x8b" else data)
            if spec["env"].get("TONY_RESTART_ATTEMPT") != "0" or "shared" not in spec:
                raise ValueError(f"{self.name}: a spec without its env or shared values")
        await self.conn.call(self.signer, "POST", wire.Started.PATH, self._body(wire.Started, pid=2))
        await asyncio.sleep(self.heartbeat_s * (hash(self.name) % 1000) / 1000)  # spread, as real starts are
        while not stop.is_set() and not self.silenced:
            try:
                # metrics ride along once per tony.task.metrics-interval-ms, as the executor sends them
                extra = {"metrics": METRICS} if self.metrics_every and self.beats % self.metrics_every == 0 else {}
                await self.conn.call(self.signer, "POST", wire.Heartbeat.PATH, self._body(wire.Heartbeat, **extra),
                                     timeout=10)
                self.last_beat = time.monotonic()
                self.beats += 1
                self.beat_times.append(self.last_beat)
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
                self.errors += 1
            try:
                await asyncio.wait_for(stop.wait(), self.heartbeat_s)
            except asyncio.TimeoutError:
                pass


async def start_executors(assignments, secret: str, port: int, heartbeat_s: float, metrics_every: int):
    """Run these executors until each holds its spec: (executors, their stop event, their tasks)."""
    executors = [Executor(n, c, secret, port, heartbeat_s, metrics_every) for n, c in assignments]
    stop = asyncio.Event()
    runs = [asyncio.create_task(e.run(stop)) for e in executors]
    while not all(e.spec_at for e in executors):
        failed = [r for r in runs if r.done() and r.exception()]
        if failed:
            raise RuntimeError(f"an executor failed: {failed[0].exception()!r}")
        await asyncio.sleep(0.05)
    return executors, stop, runs


class HelperClients:
    """Some of the simulated executors in a process of their own (--client-procs): one Python
    process cannot keep 10,000 executors' heartbeats at one a second, and the bench is about
    what the AM does with them."""

    def __init__(self, info: dict, secret: str, index: int, procs: int, heartbeat_s: float, metrics_every: int):
        self.proc = subprocess.Popen(
            [sys.executable, __file__, "--client-child", f"{index}/{procs}", "--heartbeat-s", str(heartbeat_s),
             "--metrics-every", str(metrics_every)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ, TONY_BENCH_SECRET=secret))
        self.proc.stdin.write(json.dumps(info) + "\n")
        self.proc.stdin.flush()

    async def _line(self) -> dict:
        line = await asyncio.get_running_loop().run_in_executor(None, self.proc.stdout.readline)
        if not line:
            raise RuntimeError("a client process ended early")
        return json.loads(line)

    async def specs_held(self) -> list[tuple[float, float, int]]:
        """(registered_at, spec_at, spec bytes) of each of its executors, once all hold their spec."""
        return [tuple(x) for x in (await self._line())["held"]]

    async def stop(self) -> dict:
        self.proc.stdin.close()
        end = await self._line()
        self.proc.wait()
        return end


def client_child(index: int, procs: int, heartbeat_s: float, metrics_every: int) -> None:
    info = json.loads(sys.stdin.readline())
    secret = os.environ["TONY_BENCH_SECRET"]
    port = int(info["url"].rsplit(":", 1)[1])

    async def run() -> None:
        executors, stop, runs = await start_executors(list(info["assignments"].items())[index::procs], secret, port,
                                                      heartbeat_s, metrics_every)
        print(json.dumps({"held": [(e.registered_at, e.spec_at, e.spec_bytes) for e in executors]}), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the parent says stop
        stop.set()
        await asyncio.gather(*runs, return_exceptions=True)
        print(json.dumps({"beat_times": [b for e in executors for b in e.beat_times],
                          "errors": sum(e.errors for e in executors)}), flush=True)

    asyncio.run(run())


async def drive(info: dict, secret: str, am_pid: int, steady_s: float, heartbeat_s: float, window_s: float,
                observe: bool = True, client_procs: int = 1) -> dict:
    import psutil

    port = int(info["url"].rsplit(":", 1)[1])
    defaults = JobSpec.__dataclass_fields__
    metrics_every = max(1, round(defaults["metrics_interval_ms"].default / 1000 / heartbeat_s)) if observe else 0
    assignments = list(info["assignments"].items())
    helpers = [HelperClients(info, secret, i, client_procs, heartbeat_s, metrics_every)
               for i in range(1, client_procs)]  # executors i, i+k, ... in a process of their own
    executors, stop, runs = await start_executors(assignments[::client_procs], secret, port, heartbeat_s,
                                                  metrics_every)
    held = [e for h in helpers for e in await h.specs_held()]
    last_registration = max([e.registered_at for e in executors] + [r for r, _, _ in held])
    waits = sorted([e.spec_at - last_registration for e in executors] + [s - last_registration for _, s, _ in held])
    await asyncio.sleep(2 * heartbeat_s + 1)  # every executor into its heartbeat rhythm

    am = psutil.Process(am_pid)
    cpu0, t0 = am.cpu_times(), time.monotonic()
    await asyncio.sleep(steady_s)
    cpu1, t1 = am.cpu_times(), time.monotonic()
    rss = am.memory_info().rss

    client, viewer = Signer(secret, "client-bench"), Connection(port)
    started = time.monotonic()
    status_code, status_body = await viewer.call(client, "GET", "/status.json")
    status_ms = (time.monotonic() - started) * 1000
    started = time.monotonic()
    page_code, _ = await viewer.call(client, "GET", "/")
    page_ms = (time.monotonic() - started) * 1000
    tasks_in_status = len(json.loads(status_body).get("tasks", []))

    victim = executors[0]
    victim.silenced = True
    while not victim.last_beat:
        await asyncio.sleep(0.05)
    silent_at_detection = detected = None
    deadline = time.monotonic() + window_s * 3 + 10
    while time.monotonic() < deadline and detected is None:
        await asyncio.sleep(0.25)
        _, body = await viewer.call(client, "GET", "/status.json")
        lost = [e for e in json.loads(body).get("events", [])
                if e.get("kind") == "HEARTBEAT_LOST" and e.get("task") == victim.name]
        if lost:  # the AM's own account: how long the executor had been silent when it decided
            detected, silent_at_detection = time.monotonic(), lost[0].get("silent_s")
    stop.set()
    helper_ends = [await h.stop() for h in helpers]
    await asyncio.gather(*runs, return_exceptions=True)
    for e in executors:
        e.conn.close()
    viewer.close()
    beats = sum(1 for e in executors for b in e.beat_times if t0 <= b < t1) \
        + sum(1 for end in helper_ends for b in end["beat_times"] if t0 <= b < t1)
    return {
        "executors": len(assignments),
        "spec_p50_s": round(statistics.median(waits), 3),
        "spec_all_p99_s": round(waits[min(len(waits) - 1, int(len(waits) * 0.99))], 3),
        "spec_max_s": round(waits[-1], 3),
        "spec_total_mb": round((sum(e.spec_bytes for e in executors) + sum(b for _, _, b in held)) / 2**20, 2),
        "spec_bytes_each": max([e.spec_bytes for e in executors] + [b for _, _, b in held]),
        "heartbeats_per_s": round(beats / (t1 - t0), 1),
        "heartbeats_per_s_asked": round(len(assignments) / heartbeat_s, 1),
        "heartbeat_errors": sum(e.errors for e in executors) + sum(end["errors"] for end in helper_ends),
        "client_procs": client_procs,
        "am_cpu_cores": round((cpu1.user + cpu1.system - cpu0.user - cpu0.system) / (t1 - t0), 4),
        "am_cpu_user_cores": round((cpu1.user - cpu0.user) / (t1 - t0), 4),
        "am_cpu_system_cores": round((cpu1.system - cpu0.system) / (t1 - t0), 4),
        "am_rss_mb": round(rss / 2**20, 1),
        "status_json_ms": round(status_ms, 1) if status_code == 200 else None,
        "status_tasks": tasks_in_status,
        "page_ms": round(page_ms, 1) if page_code == 200 else None,
        "detection_s": silent_at_detection,
        "detection_seen_by_client_s": round(detected - victim.last_beat, 2) if detected else None,
        "detection_window_s": window_s,
    }


def measure(executors: int, steady_s: float, framework: str, heartbeat_s: float | None = None,
            observe: bool = True, client_procs: int = 1) -> dict:
    secret = secrets.token_hex(32)
    defaults = JobSpec.__dataclass_fields__
    window_s = defaults["heartbeat_interval_ms"].default / 1000 * defaults["max_missed_heartbeats"].default
    heartbeat_s = heartbeat_s or defaults["heartbeat_interval_ms"].default / 1000
    with tempfile.TemporaryDirectory() as workdir:
        am = subprocess.Popen([sys.executable, __file__, "--am-child", str(executors), "--framework", framework,
                               "--workdir", workdir, *([] if observe else ["--no-observability"])], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=dict(os.environ, TONY_BENCH_SECRET=secret))
        try:
            line = am.stdout.readline()
            if not line:
                raise RuntimeError("the simulated AM did not start")
            result = asyncio.run(drive(json.loads(line), secret, am.pid, steady_s, heartbeat_s, window_s, observe,
                                       client_procs))
        finally:
            am.stdin.close()
            am.kill()
            am.wait()
        events = list(Path(workdir).rglob("events*.jsonl*"))
        result["history_events"] = sum(1 for p in events for _ in p.open()) if events else 0
    result["framework"] = framework
    result["observability"] = observe
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executors", type=int, nargs="+", default=[200, 1000, 2000])
    parser.add_argument("--steady-s", type=float, default=20.0, help="how long AM CPU is measured")
    parser.add_argument("--framework", default="tensorflow", choices=["tensorflow", "pytorch"])
    parser.add_argument("--heartbeat-s", type=float, help="heartbeat interval of the simulated executors "
                        "(default: tony.task.heartbeat-interval-ms's default); detection is measured against the default")
    parser.add_argument("--compare-observability", action="store_true",
                        help="also run each size without metrics and job history, alternating, to show what they cost")
    parser.add_argument("--client-procs", type=int, default=1,
                        help="processes the simulated executors are spread over (10,000 need more than one)")
    parser.add_argument("--no-observability", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--client-child", help=argparse.SUPPRESS)
    parser.add_argument("--metrics-every", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--am-child", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.client_child:
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536),
                                                    resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        index, procs = (int(x) for x in opts.client_child.split("/"))
        client_child(index, procs, opts.heartbeat_s, opts.metrics_every)
        return 0
    if opts.am_child:
        am_child(opts.am_child, opts.framework, os.environ["TONY_BENCH_SECRET"], opts.workdir,
                 not opts.no_observability)
        return 0
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))  # thousands of sockets at once
    results, compared = [], []
    for n in opts.executors:
        results.append(measure(n, opts.steady_s, opts.framework, opts.heartbeat_s, client_procs=opts.client_procs))
        if opts.compare_observability:  # alternate: with, without, with, without (the machine is noisy)
            bare = measure(n, opts.steady_s, opts.framework, opts.heartbeat_s, observe=False)
            again = measure(n, opts.steady_s, opts.framework, opts.heartbeat_s)
            bare2 = measure(n, opts.steady_s, opts.framework, opts.heartbeat_s, observe=False)
            with_obs = statistics.median([results[-1]["am_cpu_cores"], again["am_cpu_cores"]])
            without = statistics.median([bare["am_cpu_cores"], bare2["am_cpu_cores"]])
            compared.append({"executors": n, "am_cpu_cores_with": round(with_obs, 4),
                             "am_cpu_cores_without": round(without, 4),
                             "observability_cpu_cores": round(with_obs - without, 4)})
    out = {"benchmark": "scale", "cpu_count": os.cpu_count(), "results": results}
    if compared:
        out["observability_cost"] = compared
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
