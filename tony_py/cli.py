"""The `tony` command: submit a job, and see jobs (history, logs, portal); a local cluster."""

from __future__ import annotations

import importlib
import sys

USAGE = """usage: tony <command> [options]

commands:
  submit     submit a training job to YARN (TonY's flags; see `tony submit --help`)
  notebook   JupyterLab in a YARN container, relayed to this machine (`tony notebook --help`)
  history    jobs that ran: list them, show one (`tony history --help`)
  logs       print a task's log, running or finished (`tony logs --help`)
  advise     how a job could run better, from its own measurements (`tony advise --help`)
  portal     serve the job history as web pages (`tony portal --help`)
  cluster    start, stop or inspect a local YARN + HDFS cluster (`tony cluster --help`)
  jar-path   print the path of the tony-py jar (for `hadoop jar`, `java -cp`, Dataproc's --jars)
"""

COMMANDS = {
    "submit": "tony_py.client.submit",
    "notebook": "tony_py.client.notebook",
    "history": "tony_py.client.history_cmd",
    "logs": "tony_py.client.logs_cmd",
    "advise": "tony_py.client.advise_cmd",
    "portal": "tony_py.client.portal",
    "cluster": "tony_py.cluster.cli",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "jar-path":
        return print_jar_path(rest)
    if command not in COMMANDS:
        print(f"tony: unknown command {command!r}\n\n{USAGE}", file=sys.stderr, end="")
        return 2
    launch = None
    submits = command in ("submit", "notebook")  # both start the client's JVM early and report their own errors
    if submits:
        from tony_py.bridge.interrupts import guard

        guard.install()  # before the client's imports: see tony_py/bridge/interrupts.py
    try:
        if submits:
            from tony_py.bridge.gateway import early_launch

            launch = early_launch(rest)  # the JVM starts while the client imports and checks
        module = importlib.import_module(COMMANDS[command])
    except BaseException as exc:  # noqa: BLE001 - an interrupt may come wrapped (guard.caused)
        if not (isinstance(exc, KeyboardInterrupt) or (submits and guard.caused(exc))):
            raise
        if launch is not None:
            launch.discard()
        return 130
    if submits:
        return module.main(rest, launch=launch)  # it reports its own errors, with its own exit codes
    from tony_py.client.crash import report_unexpected

    try:
        return module.main(rest, prog=f"tony {command}") if command != "cluster" else module.main(rest)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - one line and a file, never a raw traceback
        return report_unexpected(f"tony {command}", exc)


def print_jar_path(rest: list[str]) -> int:
    """The jar this tony-py runs (tony_py.paths.locate_jar), for scripts: `hadoop jar "$(tony jar-path)" …`."""
    if rest:
        print(f"tony jar-path: takes no arguments (given: {' '.join(rest)})", file=sys.stderr)
        return 2
    from tony_py import paths
    from tony_py.errors import SetupError

    try:
        print(paths.locate_jar())
    except SetupError as exc:
        print(f"tony jar-path: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
