"""An unexpected exception in a command: one line for the user, the traceback in a file."""

from __future__ import annotations

import os
import sys
import tempfile
import traceback

from tony_py.errors import EXIT_JOB_FAILED


def report_unexpected(prog: str, exc: BaseException) -> int:
    """Print `<prog>: internal error: …` plus where the full traceback is, and return exit 1.
    The file is created private (mkstemp: O_EXCL, mode 0600): tracebacks can show paths and
    arguments the user would not want others to read."""
    fd, path = tempfile.mkstemp(prefix="tony-error-", suffix=".txt")
    with os.fdopen(fd, "w") as f:
        traceback.print_exception(type(exc), exc, exc.__traceback__, file=f)
    first = (str(exc).strip().splitlines() or [""])[0][:300]
    print(f"{prog}: internal error: {type(exc).__name__}{': ' + first if first else ''} "
          f"(full traceback in {path}; please include it in a bug report)", file=sys.stderr)
    return EXIT_JOB_FAILED
