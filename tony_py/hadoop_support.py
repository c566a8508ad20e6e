"""Which Hadoop releases TonY-py runs on, and the one check every entry point makes with it.

OLDEST is the oldest release on which the core of the suite passes (submit, TonY's task
environment, a restart after a kill, a node loss, history and logs, a secure submit with a
keytab: tests/integration/compat), and the `hadoop-client-api` version the jar compiles against
(pom.xml's hadoop.api.version): nothing older has been run, and the AM's calls are those of
that API. The local clusters start any release from OLDEST up (`tony cluster up
--hadoop-version`); the client refuses a cluster older than OLDEST before it submits anything
(tony_py/client/preflight.py asks the RM's /ws/v1/cluster/info).
"""

from __future__ import annotations

import re

from tony_py.errors import UsageError

OLDEST = "3.2.4"
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def parse(version: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of "3.3.6", "3.3.6-amzn-1", "3.2.4.3.2.2.0-1"; None if it is not one."""
    m = _RELEASE.match(version.strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def supported(version: str) -> bool:
    parsed = parse(version)
    return parsed is not None and parsed >= parse(OLDEST)


def check_supported(version: str, what: str) -> None:
    """UsageError (exit 2) naming `what` for a release TonY-py does not run on."""
    if parse(version) is None:
        raise UsageError(f"{what}: {version!r} is not a Hadoop release like {OLDEST}")
    if not supported(version):
        raise UsageError(f"{what}: Hadoop {version} is older than TonY-py supports; it needs {OLDEST} or newer")
