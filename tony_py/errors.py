"""Errors that end a command with a specific exit code and a one-line message."""

from __future__ import annotations

# Exit codes of every TonY-py command.
EXIT_OK = 0
EXIT_JOB_FAILED = 1
EXIT_USAGE = 2

# Exit codes of the executor process itself (the container's exit status when it ends without
# reporting a result), so the AM can say why.
EXECUTOR_EXITS = {
    3: "its executor lost the AM (no valid answer for tony.task.executor.am-lost-timeout-sec) and stopped the task",
    4: "the AM refused a call of its executor",
}
EXECUTOR_AM_LOST = 3
EXECUTOR_REFUSED = 4


class TonyError(Exception):
    """Base of the errors a command reports as one line, without a traceback."""

    exit_code = EXIT_JOB_FAILED


class UsageError(TonyError):
    """Bad flags, config keys or files: nothing was submitted or uploaded."""

    exit_code = EXIT_USAGE


class ConfigError(UsageError):
    """A config key has a value that is not allowed; the message names the key and, once
    known, the file (or flag) that set it."""

    def __init__(self, key: str, message: str, origin: str | None = None):
        where = f" (set in {origin})" if origin and origin != "defaults" else ""
        super().__init__(f"{key}{where}: {message}")
        self.key = key
        self.message = message
        self.origin = origin

    def with_origin(self, origin: str) -> "ConfigError":
        return ConfigError(self.key, self.message, origin)


class SetupError(TonyError):
    """The machine lacks something TonY-py needs (a JDK, Maven, the jar, a cluster).

    Nothing was submitted, so it shares the usage-error exit code."""

    exit_code = EXIT_USAGE
