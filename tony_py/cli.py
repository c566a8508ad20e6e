"""The `tony` command: `tony submit …` and `tony cluster up|down|status`."""

from __future__ import annotations

import sys

USAGE = """usage: tony <command> [options]

commands:
  submit     submit a training job to YARN (TonY's flags; see `tony submit --help`)
  cluster    start, stop or inspect a local YARN + HDFS cluster (`tony cluster --help`)
"""


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE, end="")
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command == "submit":
        from tony_py.bridge.interrupts import guard

        guard.install()  # before the client's imports: see tony_py/bridge/interrupts.py
        try:
            from tony_py.client.submit import main as submit_main
        except KeyboardInterrupt:
            return 130
        return submit_main(rest)
    if command == "cluster":
        from tony_py.client.crash import report_unexpected
        from tony_py.cluster.cli import main as cluster_main

        try:
            return cluster_main(rest)
        except Exception as exc:  # noqa: BLE001 - one line and a file, never a raw traceback
            return report_unexpected("tony cluster", exc)
    print(f"tony: unknown command {command!r}\n\n{USAGE}", file=sys.stderr, end="")
    return 2


if __name__ == "__main__":
    sys.exit(main())
