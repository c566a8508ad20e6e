"""A handle on one submitted application: its status, its end, its kill.

Two sources, as for the CLI's live table: YARN's application report (state, final status,
diagnostics, AM attempt) through the client's JVM, and the AM's status.json (the task table)
over HTTP while the AM runs, asked with a signed request so the AM gives full detail.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from tony_py.auth import AuthError, Signer, call_json, client_principal
from tony_py.bridge.gateway import BridgeError
from tony_py.bridge.interrupts import guard
from tony_py.errors import TonyError

FINAL_STATES = ("FINISHED", "FAILED", "KILLED")
WAITING_STATES = ("NEW", "NEW_SAVING", "SUBMITTED", "ACCEPTED")
KILL_WAIT_S = 20.0  # how long a killed application may take to end before its files are removed
STATUS_TIMEOUT_S = 2.0


class ApplicationGone(TonyError):
    """The ResourceManager answers but does not know the application (exit 1: its end is unknown)."""


class RmUnreachable(BridgeError):
    """No ResourceManager answered the call (down, failing over, cut off): not the job's end."""


# How Hadoop's client says it reached no RM (after its own retries); anything else a call raises
# (an expired ticket, a refused permission, a dead client JVM) is not an outage.
_OUTAGE_MARKERS = ("ConnectException", "EOFException", "SocketTimeoutException", "SocketException",
                   "NoRouteToHostException", "StandbyException", "RetriableException", "ConnectTimeoutException",
                   "Connection refused", "Failed on local exception")


def unreachable(exc: BaseException) -> bool:
    return isinstance(exc, RmUnreachable) or any(marker in str(exc) for marker in _OUTAGE_MARKERS)


def not_found(exc: BaseException) -> bool:
    return "ApplicationNotFoundException" in str(exc)


@dataclass(frozen=True)
class TaskStatus:
    name: str
    state: str
    attempt: int = 0
    host: str | None = None
    exit_code: int | None = None
    signal: str | None = None
    log_url: str | None = None
    metrics: dict = field(default_factory=dict)
    gpus: tuple[str, ...] = ()

    @classmethod
    def from_row(cls, row: dict) -> "TaskStatus":
        return cls(name=row.get("name", "?"), state=row.get("state", "?"), attempt=row.get("attempt") or 0,
                   host=row.get("host"), exit_code=row.get("exit_code"), signal=row.get("signal"),
                   log_url=row.get("log_url"), metrics=row.get("metrics") or {}, gpus=tuple(row.get("gpus") or ()))


@dataclass(frozen=True)
class JobStatus:
    """What `tony submit` shows: YARN's view plus the AM's task table (empty before the AM runs
    and after it ended)."""

    app_id: str
    yarn_state: str
    final_status: str  # UNDEFINED while running; SUCCEEDED | FAILED | KILLED at the end
    job_state: str | None = None  # the AM's JobState: ALLOCATING, RUNNING, RESTARTING, FINISHING, DONE
    am_attempt: int = 0
    restarts_used: int = 0
    tasks: tuple[TaskStatus, ...] = ()
    diagnostics: str = ""
    tracking_url: str | None = None
    tensorboard_url: str | None = None

    @property
    def done(self) -> bool:
        return self.yarn_state in FINAL_STATES

    @classmethod
    def of(cls, app_id: str, report: dict, am_status: dict | None) -> "JobStatus":
        r, s = report, am_status or {}
        return cls(
            app_id=app_id, yarn_state=r.get("state", "?"), final_status=r.get("final_status", "UNDEFINED"),
            job_state=s.get("state"), am_attempt=r.get("attempt") or 0, restarts_used=s.get("restarts_used") or 0,
            tasks=tuple(TaskStatus.from_row(t) for t in s.get("tasks", [])),
            # the AM's own copy first: it has the root cause's stderr tail (YARN's leaves it out)
            diagnostics=(s.get("diagnostics") or "") or (r.get("diagnostics") or "").strip(),
            tracking_url=r.get("tracking_url"), tensorboard_url=s.get("tensorboard_url"))


class Job:
    """A submitted (or attached) application. Use it as a context manager, or call close(), to
    stop the client's JVM it holds."""

    def __init__(self, gw, app_id: str, secret: str | None, staging_dir: str | None):
        self.gw = gw
        self.app_id = app_id
        self.staging_dir = staging_dir
        self._signer = Signer(secret, client_principal()) if secret else None
        self._secret = secret
        self._owns_gateway = False
        self.report: dict = {}
        self.am_status: dict | None = None
        self.warnings: list[str] = []  # keys TonY-py did not act on (see tony_py.config.keys)

    def take_gateway(self) -> None:
        """This handle owns its client JVM: close() stops it."""
        self._owns_gateway = True

    def __repr__(self) -> str:
        return f"Job({self.app_id})"

    def handover(self) -> dict:
        """What another process needs to follow this application without a JVM (an Airflow
        trigger): its id and the application's secret, which signs requests for the AM's full
        task table and root cause. Keep it as private as the staging dir's copy."""
        return {"app_id": self.app_id, "secret": self._secret}

    # ---- sources ---------------------------------------------------------------------------------
    def refresh(self) -> dict:
        """Read YARN's report and, while the AM runs, its task table; returns the report. Raises
        RmUnreachable while no ResourceManager answers (the caller decides what that means; the
        AM's table is read anyway then, from the address YARN last gave), ApplicationGone when
        one answers that it has no such application, BridgeError for anything else."""
        try:
            report = self.gw.json("read the application report", self.gw.bridge.report, self.app_id)
        except BridgeError as exc:
            if not_found(exc):
                raise ApplicationGone(f"YARN does not know {self.app_id}: a ResourceManager that restarted or failed over "
                                      "without recovery forgets its applications (as one does long after they ended); "
                                      "how it ended is unknown") from None
            if not unreachable(exc):
                raise
            if self.report.get("state") == "RUNNING":
                self._read_am_status()
            raise RmUnreachable(str(exc)) from None
        self.report = report
        if self.report.get("state") == "RUNNING":
            self._read_am_status()
        return report

    def _read_am_status(self) -> None:
        url = self.report.get("original_tracking_url") or ""
        if not url.startswith("http") or self._signer is None:
            return
        try:
            code, status = call_json(self._signer, url, "GET", "/status.json", None, timeout=STATUS_TIMEOUT_S)
            if code == 200 and isinstance(status, dict):
                self.am_status = status
        except (OSError, AuthError, ValueError):
            pass  # the AM is starting or has just gone; YARN's report still counts

    def status(self) -> JobStatus:
        self.refresh()
        return JobStatus.of(self.app_id, self.report, self.am_status)

    @property
    def tracking_url(self) -> str | None:
        return (self.report or self.refresh()).get("tracking_url")

    # ---- the end ----------------------------------------------------------------------------------
    def wait(self, timeout: float | None = None, poll_s: float = 1.0) -> str:
        """Until YARN says the application ended; its final status (SUCCEEDED, FAILED, KILLED)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self._refresh_through_outages().get("state") not in FINAL_STATES:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{self.app_id} still {self.report.get('state')} after {timeout} s")
            time.sleep(poll_s)
        self.cleanup()
        return self.report.get("final_status", "UNDEFINED")

    def _refresh_through_outages(self) -> dict:
        """refresh(), with a ResourceManager that does not answer meaning "not ended yet"."""
        try:
            return self.refresh()
        except RmUnreachable:
            return self.report

    def request_kill(self, reason: str) -> None:
        """Ask YARN to kill the application and return at once (follow it to its end)."""
        self.gw.call("kill the application", self.gw.bridge.kill, self.app_id, reason)

    def kill(self, reason: str = "killed by the TonY-py client") -> None:
        """Kill the application, wait (up to KILL_WAIT_S) until YARN reports it ended, since its
        AM may still write to the staging dir while it dies, then remove the staging dir. Nothing
        interrupts it. An application YARN does not know is not there to kill: its staging dir
        goes. Raises BridgeError, the staging dir left alone, when no ResourceManager took the
        kill: what YARN has not ended keeps its files."""
        with guard.cleanup():
            try:
                self.gw.call("kill the application", self.gw.bridge.kill, self.app_id, reason)
            except BridgeError as exc:
                if not not_found(exc):
                    raise
            else:
                deadline = time.monotonic() + KILL_WAIT_S
                while time.monotonic() < deadline:
                    try:
                        if self.refresh().get("state") in FINAL_STATES:
                            break
                    except (BridgeError, ApplicationGone):
                        pass  # YARN took the kill; its report is late
                    time.sleep(0.2)
            self.remove_staging_dir()

    def cleanup(self) -> None:
        """Remove the application's staging dir once YARN reports it ended (the AM removes it too)."""
        if self.report.get("state") in FINAL_STATES:
            self.remove_staging_dir()

    def remove_staging_dir(self) -> None:
        """For callers that know the application is over (killed, or unknown to YARN)."""
        if self.staging_dir:
            try:
                self.gw.call("delete the staging dir", self.gw.fs.delete, self.staging_dir, True)
            except TonyError:
                pass  # best effort: the AM deletes it too

    # ---- lifetime -----------------------------------------------------------------------------------
    def close(self) -> None:
        if self._owns_gateway:
            self.gw.close()

    def __enter__(self) -> "Job":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
