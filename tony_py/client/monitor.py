"""Follow a submitted job: a live view, then the final status and, on failure, its root cause.

On a terminal, a table that rich redraws in place: one line of summary (`3/4 running, 1 pending
· restart 1 of 3 · 00:02:13`) and a row per task (state, host, attempt, exit or signal, memory,
GPU use, time running), collapsed to one row per job type beyond MAX_ROWS tasks. Elsewhere (a
pipe, a log file, Dataproc's driver output) plain lines: the summary when it changes (at most
every PLAIN_EVERY_S, at once when the job's state changes), and a line per task that changes
state while the job is small enough to read them.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tony_py.advice.model import Finding
from tony_py.advice.report import top_line
from tony_py.auth import RAY_TOKEN_PURPOSE, derived_token
from tony_py.bridge.gateway import BridgeError
from tony_py.client.job import FINAL_STATES, WAITING_STATES, Job, RmUnreachable
from tony_py.errors import EXIT_JOB_FAILED, EXIT_OK
from tony_py.paths import cache_dir, private_dir

RM_SLOW_S = 5.0  # a report call without an answer this long: the ResourceManager counts as unreachable
MAX_ROWS = 40  # beyond this many tasks, one row (and no plain line) per job type
PLAIN_EVERY_S = 5.0
_STATE_STYLE = {"SUCCEEDED": "green", "RUNNING": "cyan", "FAILED": "red", "STOPPED": "yellow", "PENDING": "dim",
                "PREEMPTED": "magenta"}
_ORDER = ("RUNNING", "REGISTERED", "LAUNCHED", "ALLOCATED", "PENDING", "SUCCEEDED", "FAILED", "PREEMPTED", "PARKED",
          "STOPPED")


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    return f"{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def _bytes(n) -> str:
    if not isinstance(n, (int, float)):
        return ""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit in ("B", "KB") else f"{n:.1f} {unit}"
        n /= 1024
    return ""


def summary(report: dict, status: dict | None, elapsed_s: float) -> str:
    """One line: what the job is doing, from YARN's report and the AM's table."""
    parts = []
    tasks = (status or {}).get("tasks") or []
    if tasks:
        counts = Counter(t.get("state") for t in tasks)
        parts.append(f"{counts.get('RUNNING', 0)}/{len(tasks)} running")
        parts += [f"{n} {state.lower()}" for state in _ORDER if state != "RUNNING" and (n := counts.get(state))]
    else:
        parts.append(f"YARN {report.get('state', '?')}")
    job_state = (status or {}).get("state")
    if job_state and job_state not in ("RUNNING",):
        parts.insert(0, f"job {job_state}")
    restarts = (status or {}).get("restarts_used") or 0
    if restarts:
        parts.append(f"restart {restarts} of {(status or {}).get('restarts_allowed', '?')}")
    if preempted := (status or {}).get("preemptions"):
        parts.append(f"preempted {preempted}x")
    if (report.get("attempt") or 0) > 1:
        parts.append(f"AM attempt {report['attempt']}")
    return ", ".join(parts[:2]) + "".join(f" · {p}" for p in parts[2:]) + f" · {_duration(elapsed_s)}"


def task_table(status: dict | None, now: float) -> Table:
    tasks = (status or {}).get("tasks") or []
    if len(tasks) > MAX_ROWS:
        table = Table(show_edge=False)
        for col in ("type", "tasks", *[s.lower() for s in _ORDER]):
            table.add_column(col)
        by_type: dict[str, Counter] = {}
        for t in tasks:
            by_type.setdefault(t.get("type", "?"), Counter())[t.get("state")] += 1
        for name, counts in by_type.items():
            table.add_row(name, str(sum(counts.values())), *[str(counts.get(s, "")) for s in _ORDER])
        return table
    table = Table(show_edge=False)
    for col in ("task", "state", "host", "attempt", "exit", "memory", "GPU", "running"):
        table.add_column(col, overflow="fold")
    for t in tasks:
        state = t.get("state", "?")
        metrics = t.get("metrics") or {}
        gpu = metrics.get("gpu_utilization")
        started = t.get("started_at")
        running = _duration((t.get("finished_at") or now) - started) if started else ""
        table.add_row(t.get("name", "?"), Text(state, style=_STATE_STYLE.get(state, "")), t.get("host") or "",
                      str(t.get("attempt", 0)), t.get("signal") or ("" if t.get("exit_code") is None else str(t["exit_code"])),
                      _bytes(metrics.get("task_rss_bytes")), "" if gpu is None else f"{gpu:.0f}%", running)
    return table


def changed_task_lines(seen: dict[str, list], tasks: list[dict], attempt: bool = False) -> list[str]:
    """A line for each task whose state, attempt or container changed since the last call (`seen`
    is updated): what `tony submit` prints to a pipe, and (with the attempt) an Airflow task log."""
    lines = []
    for t in tasks:
        name, key = t.get("name"), [t.get("state"), t.get("attempt"), t.get("container_id")]
        if not name or seen.get(name) == key:
            continue
        seen[name] = key
        line = f"{name:<14} {t.get('state', '?'):<10}" + (f" attempt {t.get('attempt', 0)}" if attempt else "")
        if t.get("host"):
            line += f" on {t['host']}"
        if t.get("exit_code") is not None or t.get("signal"):
            line += f" ({t.get('signal') or 'exit ' + str(t['exit_code'])})"
        if t.get("state") in ("RUNNING", "FAILED", "PREEMPTED") and t.get("log_url"):
            line += f"  logs: {t['log_url']}"
        lines.append(line)
    return lines


class _Call:
    """A blocking call in a daemon thread of its own (one that is still blocked when the client
    exits does not hold the exit up), its outcome kept for the caller."""

    def __init__(self, fn):
        self.done = threading.Event()
        self.error: BaseException | None = None

        def run():
            try:
                fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller
                self.error = exc
            finally:
                self.done.set()

        threading.Thread(target=run, name="yarn-report", daemon=True).start()


def write_private(name: str, lines: list[str]) -> Path:
    """The lines in a file only this user can read (TonY-py's private cache): a token for the
    user that must not go into an output that may be a stored log."""
    folder = private_dir(cache_dir() / "tokens")
    path = folder / f"{name}.txt"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


class Monitor:
    def __init__(self, job: Job, quiet: bool = False, out=sys.stdout, poll_s: float = 0.5,
                 startup_timeout_ms: int = 0):
        self.job = job
        self.quiet = quiet
        self.out = out
        self.poll_s = poll_s
        self.startup_timeout_ms = startup_timeout_ms
        self.started = time.monotonic()
        self.killed = False
        self._seen: dict[str, list] = {}
        self._private_files: list[Path] = []
        self._attempt = 0
        self._printed: set[str] = set()
        self._last_summary = ("", "", 0.0)
        self.rm_unreachable_since: float | None = None  # monotonic; None while an RM answers
        self._rm_answered = self.started  # when an RM last answered
        self._live: Live | None = None
        self.seen_running = False  # the application was RUNNING once (its AM started)

    @property
    def tty(self) -> bool:
        return hasattr(self.out, "isatty") and self.out.isatty() and not self.quiet

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.out, flush=True)

    # ---- main loop -----------------------------------------------------------------------------
    def follow(self) -> int:
        live = Live(console=Console(file=self.out), refresh_per_second=4, transient=False) if self.tty else None
        self._live = live
        # soft wrap: a long line (a URL with a token) stays one line a terminal can copy whole
        say = (lambda text: live.console.print(text, soft_wrap=True, highlight=False, markup=False)) if live \
            else self.say
        try:
            if live:
                live.start()
            while True:
                self._refresh(say)
                self._once(say)
                if live:
                    live.update(self._view())
                elif not self.quiet:
                    self._plain()
                if self.job.report.get("state") in FINAL_STATES:
                    break
                time.sleep(self.poll_s)
        finally:
            if live:
                live.stop()
            self.forget_private_files()  # the job is over: its tokens open nothing any more
        return self._final()

    def _refresh(self, say) -> None:
        """YARN's report, through outages: while no ResourceManager answers (a restart, a
        fail-over, a network cut) the job is not over, so the client keeps following it (the
        AM's table from the address YARN gave last) and says since when the RM is unreachable.
        Hadoop's client retries a silent RM inside the call for a while (its connect wait and IPC
        retries, a minute or more), so the call runs beside the view: past RM_SLOW_S without an
        answer the RM counts as unreachable and the view says so while the call goes on."""
        call = _Call(self.job.refresh)
        while not call.done.wait(RM_SLOW_S if self.rm_unreachable_since is None else self.poll_s):
            self._rm_away(say, f"no answer in {RM_SLOW_S:.0f} s")
            self._redraw()
        if isinstance(call.error, RmUnreachable):
            self._rm_away(say, str(call.error).splitlines()[0][:200])
            return
        if call.error is not None:
            raise call.error
        if self.rm_unreachable_since is not None:
            say(f"the ResourceManager answers again after {time.monotonic() - self.rm_unreachable_since:.0f} s")
            self.rm_unreachable_since = None
        self._rm_answered = time.monotonic()
        if self.job.report.get("state") == "RUNNING":
            self.seen_running = True

    def _rm_away(self, say, why: str) -> None:
        if self.rm_unreachable_since is None:
            self.rm_unreachable_since = self._rm_answered
            say(f"the ResourceManager does not answer ({why}); following {self.job.app_id} on until it does")

    def _redraw(self) -> None:
        if self._live is not None:
            self._live.update(self._view())
        elif not self.quiet:
            self._plain()

    def _rm_note(self) -> str:
        if self.rm_unreachable_since is None:
            return ""
        return f" · ResourceManager unreachable for {time.monotonic() - self.rm_unreachable_since:.0f} s"

    def _view(self):
        elapsed = time.monotonic() - self.started
        return Group(Text(f"{self.job.app_id} · {summary(self.job.report, self.job.am_status, elapsed)}"
                          f"{self._rm_note()}"),
                     task_table(self.job.am_status, time.time()))

    def _once(self, say) -> None:
        """Things said once: the tracking URL, TensorBoard, a task's dashboard (Ray's), a new AM
        attempt, a startup kill."""
        r, s = self.job.report, self.job.am_status or {}
        for key, text in (("tracking", r.get("tracking_url") and f"tracking URL: {r['tracking_url']}"),
                          ("tensorboard", s.get("tensorboard_url") and f"TensorBoard: {s['tensorboard_url']}")):
            if text and key not in self._printed:
                self._printed.add(key)
                say(text)
        for d in s.get("dashboards") or []:
            if f"dashboard {d.get('url')}" not in self._printed:
                self._printed.add(f"dashboard {d.get('url')}")
                say(f"{d.get('name')}: {d.get('url')}")
                if s.get("framework") == "ray":
                    say(self._ray_token_line())
        for failure in s.get("failures") or []:
            # A failure that a restart follows is over before the next poll: its state in the table
            # (FAILED, PREEMPTED) would never be seen. Each is said once, as it happened.
            key = f"failure {failure.get('task')} {failure.get('attempt')} {failure.get('time')}"
            if key not in self._printed:
                self._printed.add(key)
                state = "PREEMPTED" if failure.get("kind") == "preempted" else "FAILED"
                where = f" on {failure['host']}" if failure.get("host") else ""
                say(f"  {failure.get('task', '?'):<14} {state:<10} (attempt {failure.get('attempt')}{where}): "
                    f"{failure.get('message', '')}")
        attempt = r.get("attempt") or 0
        if attempt and attempt != self._attempt:
            if self._attempt:
                say(f"AM attempt {self._attempt} ended; YARN started AM attempt {attempt}")
            self._attempt = attempt
        self._check_startup(say)

    def _ray_token_line(self) -> str:
        """Ray runs with token authentication, its token derived from the app secret (the
        executor's taskenv.py): the dashboard asks for it."""
        handover = getattr(self.job, "handover", None)
        if handover is None:
            return "  it asks for Ray's token: $RAY_AUTH_TOKEN in the job's tasks"
        token = derived_token(handover()["secret"], RAY_TOKEN_PURPOSE)
        if hasattr(self.out, "isatty") and self.out.isatty():
            return f"  its token (Ray's token authentication): {token}"
        path = self.keep_private(f"{self.job.app_id}-ray", [f"Ray's token for {self.job.app_id}: {token}"])
        return f"  its token is in {path} (not printed: this output is not a terminal)"

    def keep_private(self, name: str, lines: list[str]) -> Path:
        """Lines with a token, in a 0600 file of TonY-py's private cache instead of an output that
        may be a stored log; removed when the client is done (forget_private_files)."""
        path = write_private(name, lines)
        self._private_files.append(path)
        return path

    def forget_private_files(self) -> None:
        for path in self._private_files:
            path.unlink(missing_ok=True)
        self._private_files.clear()

    def _check_startup(self, say) -> None:
        """TonY's tony.am.startup-timeout: kill an application whose AM never started. Only until
        it first ran: a recovered application (after an RM restart or fail-over) reads ACCEPTED
        again until its AM re-registers, and that is no reason to kill a long-running job."""
        if not self.startup_timeout_ms or self.killed or self.seen_running or self.rm_unreachable_since is not None \
                or self.job.report.get("state") not in WAITING_STATES:
            return  # (while no RM answers, the last report is stale: no kill on it)
        if (time.monotonic() - self.started) * 1000 > self.startup_timeout_ms:
            reason = (f"the AM did not start within tony.am.startup-timeout={self.startup_timeout_ms} ms (the "
                      f"application stayed {self.job.report.get('state')}: the queue or the cluster has no room for it)")
            say(f"killing {self.job.app_id}: {reason}")
            try:
                self.job.request_kill(reason)
                self.killed = True
            except BridgeError as exc:  # asked again at the next poll
                say(f"the kill did not reach YARN ({str(exc).splitlines()[0][:200]})")

    def _plain(self) -> None:
        tasks = (self.job.am_status or {}).get("tasks") or []
        if len(tasks) <= MAX_ROWS:
            for line in changed_task_lines(self._seen, tasks):
                self.say("  " + line)
        now = time.monotonic()
        text = summary(self.job.report, self.job.am_status, now - self.started) + self._rm_note()
        core = summary(self.job.report, self.job.am_status, 0).rsplit(" · ", 1)[0]  # without the clocks
        job_state = (self.job.am_status or {}).get("state") or self.job.report.get("state", "")
        last_core, last_state, last_at = self._last_summary
        if core != last_core and (job_state != last_state or now - last_at >= PLAIN_EVERY_S):
            self.say(f"[{self.job.app_id}] {text}")
            self._last_summary = (core, job_state, now)

    def _final(self) -> int:
        r = self.job.report
        final = r.get("final_status")
        where = "" if r.get("local") else f" (YARN state {r.get('state')})"
        print(f"{self.job.app_id} finished: {final}{where}", file=self.out, flush=True)
        status = self.job.am_status or {}
        # the AM's own copy first: it has the root cause's stderr tail and traceback, which YARN's
        # (readable by every user of a cluster without ACLs) leaves out
        diagnostics = (status.get("diagnostics") or r.get("diagnostics") or "").strip()
        if final != "SUCCEEDED" and diagnostics:
            print(diagnostics, file=self.out, flush=True)
        elif status.get("diagnostics") and not self.quiet:
            print(status["diagnostics"].splitlines()[0], file=self.out, flush=True)
        if status.get("advice") and not self.quiet:  # the AM's findings (tony_py/advice): the most pressing
            print(top_line([Finding.from_dict(f) for f in status["advice"]]), file=self.out, flush=True)
        return EXIT_OK if final == "SUCCEEDED" else EXIT_JOB_FAILED
