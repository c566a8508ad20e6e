"""Follow a submitted job: a live task table (rich on a TTY, plain lines otherwise), the
tracking URL and each task's log URL, then the final status and, on failure, its root cause.

Two sources: YARN's application report (state, final status, diagnostics, AM attempt) through
the client JVM, and the AM's status.json (the task table) over HTTP while the AM runs.
"""

from __future__ import annotations

import sys
import time

from rich.console import Console
from rich.live import Live
from rich.table import Table

from tony_py.auth import AuthError, Signer, call_json
from tony_py.errors import EXIT_JOB_FAILED, EXIT_OK, TonyError

FINAL_STATES = ("FINISHED", "FAILED", "KILLED")
REPORT_GRACE_S = 60.0  # how long YARN may fail to answer before the client gives up
_STATE_STYLE = {
    "SUCCEEDED": "green",
    "RUNNING": "cyan",
    "FAILED": "red",
    "STOPPED": "yellow",
    "PENDING": "dim",
}


class Monitor:
    def __init__(self, gw, app_id: str, signer: Signer | None = None, quiet: bool = False, out=sys.stdout,
                 poll_s: float = 0.5, startup_timeout_ms: int = 0):
        self.gw = gw
        self.app_id = app_id
        self.signer = signer  # signs status requests: the AM gives full detail only to signed ones
        self.quiet = quiet
        self.out = out
        self.poll_s = poll_s
        self.report: dict = {}
        self.status: dict | None = None
        self.startup_timeout_ms = startup_timeout_ms
        self.started = time.monotonic()
        self.killed = False
        self._seen: dict[str, tuple] = {}
        self._attempt = 0
        self._report_failing_since: float | None = None

    # ---- sources -----------------------------------------------------------------------------
    def _poll(self) -> None:
        try:
            self.report = self.gw.json("read the application report", self.gw.bridge.report, self.app_id)
            self._report_failing_since = None
        except TonyError:
            # A ResourceManager fail-over or a network blip must not end a healthy job's client.
            now = time.monotonic()
            self._report_failing_since = self._report_failing_since or now
            if now - self._report_failing_since > REPORT_GRACE_S:
                raise
            return
        url = self.report.get("original_tracking_url") or ""
        if self.report.get("state") == "RUNNING" and url.startswith("http") and self.signer is not None:
            try:
                code, status = call_json(self.signer, url, "GET", "/status.json", None, timeout=2)
                if code == 200 and isinstance(status, dict):
                    self.status = status
            except (OSError, AuthError, ValueError):
                pass  # the AM is starting or has just gone; YARN's report still counts

    # ---- rendering ---------------------------------------------------------------------------
    def _table(self) -> Table:
        table = Table(title=f"{self.app_id} — {self._headline()}", title_justify="left")
        for col in ("task", "state", "host", "exit", "logs"):
            table.add_column(col, overflow="fold")
        for t in (self.status or {}).get("tasks", []):
            exit_text = t.get("signal") or ("" if t.get("exit_code") is None else str(t["exit_code"]))
            state = t.get("state", "?")
            table.add_row(
                t.get("name", "?"), f"[{_STATE_STYLE.get(state, '')}]{state}[/]", t.get("host") or "",
                exit_text, t.get("log_url") or "",
            )
        return table

    def _headline(self) -> str:
        r = self.report
        text = f"YARN {r.get('state', '?')}"
        if self.status:
            text += f", job {self.status.get('state')}"
            if self.status.get("restarts_used"):
                text += f" (gang restarts: {self.status['restarts_used']})"
        if r.get("attempt", 0) > 1:
            text += f", AM attempt {r['attempt']}"
        return text

    def _plain_updates(self) -> None:
        for t in (self.status or {}).get("tasks", []):
            if "name" not in t or "state" not in t:
                continue
            key = (t["state"], t.get("attempt"), t.get("container_id"))
            if self._seen.get(t["name"]) == key:
                continue
            self._seen[t["name"]] = key
            line = f"  {t['name']:<14} {t['state']:<10}"
            if t.get("host"):
                line += f" on {t['host']}"
            if t.get("exit_code") is not None or t.get("signal"):
                line += f" ({t.get('signal') or 'exit ' + str(t['exit_code'])})"
            if t["state"] in ("RUNNING", "FAILED") and t.get("log_url"):
                line += f"  logs: {t['log_url']}"
            print(line, file=self.out, flush=True)

    def _check_startup(self, say) -> None:
        """TonY's tony.am.startup-timeout: kill an application whose AM never started."""
        waiting = self.report.get("state") in ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED")
        if not self.startup_timeout_ms or self.killed or not waiting:
            return
        if (time.monotonic() - self.started) * 1000 > self.startup_timeout_ms:
            reason = (f"the AM did not start within tony.am.startup-timeout={self.startup_timeout_ms} ms (the "
                      f"application stayed {self.report.get('state')}: the queue or the cluster has no room for it)")
            say(f"killing {self.app_id}: {reason}")
            self.gw.call("kill the application", self.gw.bridge.kill, self.app_id, reason)
            self.killed = True

    def _attempt_change(self, say) -> None:
        attempt = self.report.get("attempt") or 0
        if attempt and attempt != self._attempt:
            if self._attempt:
                say(f"AM attempt {self._attempt} ended; YARN started AM attempt {attempt}")
            self._attempt = attempt

    # ---- main loop -----------------------------------------------------------------------------
    def follow(self) -> int:
        tty = hasattr(self.out, "isatty") and self.out.isatty() and not self.quiet
        printed_url = printed_tb = False

        def say(text: str) -> None:
            if not self.quiet:
                print(text, file=self.out, flush=True)

        live = Live(console=Console(file=self.out), refresh_per_second=4, transient=False) if tty else None
        try:
            if live:
                live.start()
            while True:
                self._poll()
                if not printed_url and self.report.get("tracking_url"):
                    (live.console.print if live else say)(f"tracking URL: {self.report['tracking_url']}")
                    printed_url = True
                tb = (self.status or {}).get("tensorboard_url")
                if tb and not printed_tb:
                    (live.console.print if live else say)(f"TensorBoard: {tb}")
                    printed_tb = True
                self._attempt_change(live.console.print if live else say)
                self._check_startup((live.console.print if live else say))
                if live:
                    live.update(self._table())
                elif not self.quiet:
                    self._plain_updates()
                if self.report.get("state") in FINAL_STATES:
                    break
                time.sleep(self.poll_s)
        finally:
            if live:
                live.stop()
        return self._final()

    def _final(self) -> int:
        r = self.report
        final = r.get("final_status")
        print(f"{self.app_id} finished: {final} (YARN state {r.get('state')})", file=self.out, flush=True)
        diagnostics = (r.get("diagnostics") or "").strip()
        if final != "SUCCEEDED" and diagnostics:
            print(diagnostics, file=self.out, flush=True)
        elif self.status and self.status.get("diagnostics") and not self.quiet:
            print(self.status["diagnostics"].splitlines()[0], file=self.out, flush=True)
        return EXIT_OK if final == "SUCCEEDED" else EXIT_JOB_FAILED
