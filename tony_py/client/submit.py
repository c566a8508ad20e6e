"""`tony submit` / `python -m tony_py.submit`: TonY's flags in, a finished job's exit code out.

A thin layer over the same pieces the Python API uses (tony_py/api.py): prepare (every check
that needs no cluster), Submission (stage and submit), Job (status, wait, kill), plus the live
view (monitor.py) and the exit codes: 0 succeeded, 1 failed, 2 bad input (nothing was
submitted), 130 interrupted (the application is killed).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from tony_py.bridge.gateway import BridgeError, JvmLaunch
from tony_py.bridge.interrupts import guard
from tony_py.client.crash import report_unexpected
from tony_py.client.flags import parse_args
from tony_py.client.job import ApplicationGone
from tony_py.client.monitor import Monitor
from tony_py.client.prepare import PreparedJob, local_paths, prepare
from tony_py import paths, timeline
from tony_py.client.submission import Submission, open_gateway
from tony_py.errors import TonyError, UsageError
from tony_py.history.store import HistoryStore

_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """Started by the jar's driver (TONY_DIE_WITH_PARENT): if that JVM is killed, even with
    SIGKILL, this client gets SIGTERM and kills the application instead of leaving it alone."""
    if os.environ.get("TONY_DIE_WITH_PARENT") != "1":
        return
    parent = os.getppid()
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the driver died before the request was armed
        os.kill(os.getpid(), signal.SIGTERM)


def compact_history(gw, prepared: PreparedJob, job) -> None:
    """The finished job's events as Parquet, for pandas or Spark (best effort: the history is
    readable without it, and `tony history` does it later otherwise)."""
    try:
        store = HistoryStore.for_user(gw, prepared.conf.get)
        summary = store.find_near(job.app_id, (job.report.get("finish_time") or 0) / 1000 or time.time())
        if summary is not None:
            store.compact(summary)
    except TonyError as exc:
        print(f"tony: warning: could not compact the job history: {exc}", file=sys.stderr)


def token_lifetime_note(end_ms: int) -> str:
    """Without a keytab a job lives on the tokens it was submitted with: say until when."""
    end = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(end_ms / 1000))
    return (f"note: no keytab, so this job runs on the delegation tokens it was submitted with; they end at {end}: "
            "anything it starts or reads on HDFS after that fails (give --principal and --keytab for longer jobs)")


def run(gw, prepared: PreparedJob, prog: str, out=sys.stdout, door=None) -> int:
    def say(text: str) -> None:
        if not prepared.args.quiet:
            print(text, file=out, flush=True)

    submission = Submission(gw, prepared, warn=lambda text: print(f"{prog}: warning: {text}", file=sys.stderr))
    spec = prepared.spec
    try:
        job = submission.submit()
    except KeyboardInterrupt as exc:
        if submission.submitted:
            say(f"\ninterrupted ({exc or 'Ctrl-C'}): killed {submission.app_id}")
        raise
    # From here on a Ctrl-C kills the application, whatever the client is doing (one that came
    # while it printed what it submitted left the job running: a client interrupted there exited 130)
    try:
        if submission.reused:
            say(f"reused from the cache (not uploaded): {', '.join(submission.reused)}")
        paths.remember_last_app(job.app_id)
        say(f"submitted {job.app_id}: {spec.framework}, " + ", ".join(f"{t.instances} x {t.name}" for t in spec.types))
        if submission.tokens_end_ms:
            say(token_lifetime_note(submission.tokens_end_ms))
        if prepared.args.detach:
            print(job.app_id, file=out)
            return 0  # the AM deletes the staging dir when the job ends
        monitor = (door.monitor(job, submission.secret, prepared, out) if door else
                   Monitor(job, quiet=prepared.args.quiet, out=out, startup_timeout_ms=spec.startup_timeout_ms))
        code = monitor.follow()
        with guard.cleanup():
            job.cleanup()  # the application has ended: remove what is left of its staging dir
            compact_history(gw, prepared, job)
        if spec.portal_url:  # TonY's line
            say(f"Link for {job.app_id}'s events/metrics: {spec.portal_url}/jobs/{job.app_id}")
        return code
    except KeyboardInterrupt as exc:
        say(f"\ninterrupted ({exc or 'Ctrl-C'}): killing {job.app_id}")
        try:
            job.kill("killed by the TonY-py client (Ctrl-C)")
        except BridgeError as kill_error:
            print(f"{prog}: could not kill {job.app_id}: no ResourceManager took the kill ({kill_error}); "
                  f"it may still run: `yarn application -kill {job.app_id}` ends it", file=sys.stderr)
        raise
    except ApplicationGone:
        with guard.cleanup():
            job.remove_staging_dir()  # YARN has no such application: nothing will read its files
        raise  # main() says so
    except BaseException:
        # The client broke, not the job: YARN has not ended it, so it is neither killed nor
        # cleaned up (its AM removes the staging dir when it ends).
        print(f"{prog}: stopped following {job.app_id}, which goes on: `tony logs {job.app_id}` reads it, "
              f"`yarn application -kill {job.app_id}` ends it", file=sys.stderr)
        raise


def run_local(prepared: PreparedJob, prog: str, out=sys.stdout) -> int:
    """--local: the job on this machine (tony_py/client/local.py), followed as on a cluster."""
    from tony_py.client.local import start_local

    if prepared.args.detach:
        raise UsageError("--detach: a local job runs inside this process; it cannot outlive it")
    job = start_local(prepared)
    spec = prepared.spec
    try:  # from here a Ctrl-C stops the job's processes, whatever the client is doing
        if not prepared.args.quiet:
            print(f"started {job.app_id} on this machine: {spec.framework}, "
                  + ", ".join(f"{t.instances} x {t.name}" for t in spec.types) + f"; logs in {job.logs}", file=out,
                  flush=True)
        return Monitor(job, quiet=prepared.args.quiet, out=out).follow()
    except KeyboardInterrupt as exc:
        if not prepared.args.quiet:
            print(f"\ninterrupted ({exc or 'Ctrl-C'}): stopping {job.app_id}", file=out, flush=True)
        with guard.cleanup():
            job.kill("killed by the TonY-py client (Ctrl-C)")
        raise
    finally:
        job.close()


def main(argv: list[str] | None = None, prog: str = "tony submit", launch: JvmLaunch | None = None,
         door=None) -> int:
    """`door`: another front door on the same flow (`tony notebook`, tony_py/client/notebook.py):
    its own flags, job shape and monitor."""
    # Ctrl-C, a closed terminal or a `kill` end the client the same way: the application is
    # killed. Never in the middle of a JVM bridge call (tony_py/bridge/interrupts.py).
    guard.install()
    die_with_parent()
    timeline.mark("imports_done")
    try:
        argv = sys.argv[1:] if argv is None else argv
        args = local_paths(door.parse(argv, prog) if door else parse_args(argv, prog=prog))
        if args.local:  # no cluster: no JVM either
            prepared = prepare(args)
            for warning in prepared.warnings:
                print(f"{prog}: warning: {warning}", file=sys.stderr)
            return run_local(prepared, prog)
        with tempfile.TemporaryDirectory(prefix="tony-conf-") as tmp:
            gw, prepared = open_gateway(args, Path(tmp), launch, door.adjust if door else None)
        with gw:
            for warning in prepared.warnings:
                print(f"{prog}: warning: {warning}", file=sys.stderr)
            return run(gw, prepared, prog, door=door)
    except TonyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - never a raw traceback: one line and a file
        return report_unexpected(prog, exc)
    finally:
        if launch is not None:
            launch.discard()  # started early for input that never reached the cluster


if __name__ == "__main__":
    sys.exit(main())
