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
import shlex
import socket
import sys

from tony_py.auth import NOTEBOOK_TOKEN_PURPOSE, derived_token
from tony_py.client.flags import SubmitArgs, parse_args
from tony_py.client.job import Job
from tony_py.client.monitor import Monitor
from tony_py.client.prepare import PreparedJob, python_for
from tony_py.client.relay import Relay
from tony_py.config.build import job_type_names
from tony_py.config.layers import TonyConf
from tony_py.config.spec import NOTEBOOK_TYPE
from tony_py.errors import UsageError

DEFAULT_LIFETIME_MS = 24 * 60 * 60 * 1000  # TonY's NotebookSubmitter: tony.application.timeout of a day
SSH_LOCAL_PORT = 8888
PROBE_TIMEOUT_S = 0.5


class NotebookDoor:
    """What `tony notebook` changes in `tony submit`'s flow (tony_py/client/submit.py): its flags,
    its job's shape, and a monitor that relays once the server listens."""

    prog = "tony notebook"

    def __init__(self) -> None:
        self.relay: Relay | None = None
        self.custom_command = False

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
        return NotebookMonitor(job, self.relay, token, self.custom_command, quiet=prepared.args.quiet, out=out,
                               startup_timeout_ms=prepared.spec.startup_timeout_ms)

    def close(self) -> None:
        if self.relay is not None:
            self.relay.close()


class NotebookMonitor(Monitor):
    """The job's live view, plus: relay to the notebook task once it listens (again after a
    restart moved it), and say where to open it."""

    def __init__(self, job: Job, relay: Relay, token: str, custom_command: bool, **kwargs):
        super().__init__(job, **kwargs)
        self.relay = relay
        self.token = token
        self.custom_command = custom_command
        self.target: tuple[str, int] | None = None

    def _once(self, say) -> None:
        super()._once(say)
        target = notebook_address(self.job.am_status)
        if target is None or target == self.target or not listening(*target):
            return
        first = self.target is None
        self.target = target
        self.relay.start(*target)
        say("\n".join(open_lines(self.relay.port, self.token, target, self.custom_command, first)))


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


def open_lines(port: int, token: str, target: tuple[str, int], custom_command: bool, first: bool) -> list[str]:
    path = "/" if custom_command else f"/lab?token={token}"
    where = f"{target[0]}:{target[1]}"
    if not first:
        return [f"notebook: the task moved to {where}; http://127.0.0.1:{port}{path} now relays there"]
    return [f"notebook: open http://127.0.0.1:{port}{path}  (relayed to {where})",
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
