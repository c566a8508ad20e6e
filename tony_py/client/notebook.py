"""`tony notebook` / `python -m tony_py.client.notebook` (TonY's NotebookSubmitter): JupyterLab, or
any web command given with --executes, in one YARN container, relayed to this machine.

The job is TonY's notebook shape: one task of type `notebook` with the resources asked for
(tony.notebook.memory, .vcores, .gpus), the user's venv and src_dir, and a lifetime of 24 h
unless tony.application.timeout says otherwise. The task serves on NOTEBOOK_PORT (the port its
executor reserved) on its node's address. Jupyter's token is derived from the application's
secret by the executor and by this client (auth.derived_token), so it is in no file, spec or
log; it is printed here, in the URL, for the user. Everything else is `tony submit`: the same
flags, checks, exit codes, and Ctrl-C (or a closed terminal) kills the application.
"""

from __future__ import annotations

import getpass
import os
import shlex
import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tony_py.auth import NOTEBOOK_TOKEN_PURPOSE, derived_token
from tony_py.client.flags import SubmitArgs, parse_args
from tony_py.client.job import Job
from tony_py.client.monitor import Monitor, write_private
from tony_py.client.prepare import PreparedJob, python_for
from tony_py.client.relay import Relay
from tony_py.config.build import job_type_names
from tony_py.config.layers import TonyConf
from tony_py.config.spec import NOTEBOOK_TYPE
from tony_py.errors import UsageError

DEFAULT_LIFETIME_MS = 24 * 60 * 60 * 1000  # TonY's NotebookSubmitter: tony.application.timeout of a day
SSH_LOCAL_PORT = 8888
PROBE_TIMEOUT_S = 0.5
UNREACHABLE_NOTE_S = 60.0  # running, yet not reachable from here for this long: say so once


class NotebookDoor:
    """What `tony notebook` changes in `tony submit`'s flow (tony_py/client/submit.py): its flags,
    its job's shape, and a monitor that relays once the server listens."""

    prog = "tony notebook"

    def __init__(self) -> None:
        self.relay: Relay | None = None
        self.custom_command = False
        self.monitor_: NotebookMonitor | None = None

    def parse(self, argv: list[str], prog: str) -> SubmitArgs:
        args = parse_args(argv, prog=prog, notebook=True)
        if args.local:
            raise UsageError("--local: a notebook runs in a YARN container; leave --local out")
        if args.detach:
            raise UsageError("--detach: the notebook is reached through this client's relay; it cannot outlive it")
        if args.port is not None and not 0 < args.port < 65536:
            raise UsageError(f"--port {args.port}: expected a port number from 1 to 65535 (or leave it out for a free one)")
        self.custom_command = bool(args.executes)
        self.relay = Relay(args.port or 0)  # before anything is submitted: a busy port is bad input
        return args

    def adjust(self, conf: TonyConf, args: SubmitArgs) -> None:
        """TonY's notebook job: one notebook task, standalone, alive for a day by default."""
        others = [name for name in job_type_names(conf)
                  if name != NOTEBOOK_TYPE and (conf.get(f"tony.{name}.instances") or "0").strip() not in ("", "0")]
        if others:
            key = f"tony.{others[0]}.instances"
            raise UsageError(f"{key}={conf.get(key)} (from {conf.origin(key)}): tony notebook runs one task of type "
                             f"'{NOTEBOOK_TYPE}' only; give its resources as tony.{NOTEBOOK_TYPE}.memory, .vcores and "
                             ".gpus, or use tony submit for a training job")
        key = f"tony.{NOTEBOOK_TYPE}.instances"
        if key in conf and conf.get(key) != "1":
            raise UsageError(f"{key}={conf.get(key)}: tony notebook runs exactly 1 notebook task")
        defaults = {key: "1", "tony.application.framework": "standalone",
                    "tony.application.timeout": str(DEFAULT_LIFETIME_MS)}
        if not args.executes and not conf.get(f"tony.{NOTEBOOK_TYPE}.command"):
            python = python_for(args) or conf.get("tony.executor.python") or "python3"
            defaults[f"tony.{NOTEBOOK_TYPE}.command"] = f"{shlex.quote(python)} -m tony_py.jupyter"
        for name, value in defaults.items():
            if name not in conf or conf.origin(name) == "defaults":
                conf.set(name, value, "tony notebook")

    def monitor(self, job: Job, secret: str, prepared: PreparedJob, out) -> Monitor:
        token = derived_token(secret, NOTEBOOK_TOKEN_PURPOSE)
        self.monitor_ = NotebookMonitor(job, self.relay, token, self.custom_command, quiet=prepared.args.quiet,
                                        out=out, startup_timeout_ms=prepared.spec.startup_timeout_ms)
        return self.monitor_

    def close(self) -> None:
        """The relay stops and the file with the token goes: the notebook is gone with the client."""
        if self.relay is not None:
            self.relay.close()
        if self.monitor_ is not None:
            self.monitor_.forget_private_files()


class NotebookMonitor(Monitor):
    """The job's live view, plus: relay to the notebook task once it listens (again after a
    restart moved it; nowhere while it is not running), and say where to open it."""

    def __init__(self, job: Job, relay: Relay, token: str, custom_command: bool, **kwargs):
        super().__init__(job, **kwargs)
        self.relay = relay
        self.token = token
        self.custom_command = custom_command
        self.target: tuple[str, int] | None = None
        self.shown = False
        self.url_file: Path | None = None
        self._unreachable_since: float | None = None
        self._unreachable_said = False

    def _once(self, say) -> None:
        super()._once(say)
        address = notebook_address(self.job.am_status)
        if address != self.target and self.target is not None:
            self.relay.stop_forwarding()  # its old port may be someone else's now; requests carry the token
            self.target = None
        if address is None or address == self.target:
            self._unreachable_since = None
            return
        if not listening(*address):
            self._say_unreachable(say, address)
            return
        if not self.custom_command and not token_required(*address):
            reason = (f"the notebook at {address[0]}:{address[1]} answers without Jupyter's token (a Jupyter "
                      "config of the job's environment turns authentication off?): stopped, never opened")
            say(f"killing {self.job.app_id}: {reason}")
            self.job.request_kill(reason)
            return
        self.target, self._unreachable_since = address, None
        self.relay.start(*address)
        self._show(say, address)

    def _show(self, say, address: tuple[str, int]) -> None:
        terminal = hasattr(self.out, "isatty") and self.out.isatty()
        lines = open_lines(self.relay.port, self.token if terminal else None, address, self.custom_command,
                           first=not self.shown)
        if not terminal and not self.shown:  # a pipe may be a stored log: the token goes to a private file
            self.url_file = self.keep_private(f"{self.job.app_id}-notebook",
                                              open_lines(self.relay.port, self.token, address, self.custom_command,
                                                         first=True))
            lines.insert(1, f"  the URL with Jupyter's token is in {self.url_file} (not printed: this output is not "
                            "a terminal)")
        self.shown = True
        if self.quiet:  # --quiet still says where the notebook is
            print("\n".join(lines), file=self.out, flush=True)
        else:
            say("\n".join(lines))

    def _say_unreachable(self, say, address: tuple[str, int]) -> None:
        now = time.monotonic()
        self._unreachable_since = self._unreachable_since or now
        if now - self._unreachable_since > UNREACHABLE_NOTE_S and not self._unreachable_said:
            self._unreachable_said = True
            say(f"notebook: {NOTEBOOK_TYPE}:0 runs at {address[0]}:{address[1]} but does not accept connections from "
                "this machine yet: is the server listening on $NOTEBOOK_PORT on the node's address, and can "
                "this host reach that node?")


def notebook_address(status: dict | None) -> tuple[str, int] | None:
    """host:port of the running notebook task, from the AM's (signed, full) status."""
    for row in (status or {}).get("tasks") or []:
        if row.get("type") == NOTEBOOK_TYPE and row.get("state") == "RUNNING" and row.get("address"):
            host, _, port = row["address"].rpartition(":")
            if host and port.isdigit():
                return host, int(port)
    return None


def listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=PROBE_TIMEOUT_S):
            return True
    except OSError:
        return False


def token_required(host: str, port: int) -> bool:
    """Whether Jupyter refuses a request without the token (403), as it must. The standard
    library's client: the jar's bundled runtime carries no requests."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/api/status", timeout=PROBE_TIMEOUT_S * 4):
            return False  # answered 2xx without a token
    except urllib.error.HTTPError as exc:
        return exc.code == 403
    except (OSError, ValueError):
        return True  # not answering is not answering without a token; the relay finds out


def open_lines(port: int, token: str | None, target: tuple[str, int], custom_command: bool, first: bool) -> list[str]:
    """What the user is told; without the token when it must not be printed."""
    secret = f"?token={token}" if token else ""
    path = "/" if custom_command else f"/lab{secret}"
    where = f"{target[0]}:{target[1]}"
    if not first:
        return [f"notebook: the task runs at {where} now; http://127.0.0.1:{port}{path} relays there"]
    lines = [f"notebook: open http://127.0.0.1:{port}{path}  (relayed to {where})"]
    if custom_command and token:
        lines.append(f"  your server's token (it has it as $JUPYTER_TOKEN): {token}")
    return lines + [
        f"  from a laptop: ssh -N -L {SSH_LOCAL_PORT}:127.0.0.1:{port} {getpass.getuser()}@{socket.getfqdn()}"
        f"  then open http://localhost:{SSH_LOCAL_PORT}{path}",
        "  Ctrl-C here (or closing this client) ends the notebook and kills the application"]


def main(argv: list[str] | None = None, prog: str = NotebookDoor.prog, launch=None) -> int:
    from tony_py.client.submit import main as submit_main

    door = NotebookDoor()
    try:
        return submit_main(sys.argv[1:] if argv is None else argv, prog=prog, launch=launch, door=door)
    finally:
        door.close()


if __name__ == "__main__":
    from tony_py.bridge.interrupts import guard

    guard.install()
    sys.exit(main(prog="python -m tony_py.client.notebook"))
