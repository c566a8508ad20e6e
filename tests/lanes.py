"""Which lane a test runs in, and what the scheduler may group (tests/conftest.py).

- `multihost`: tests/integration/multihost, on the Docker cluster; one group, so one worker
  runs them all on one cluster.
- `secure`: tests/integration/secure, on the Kerberos cluster; one group likewise.
- `unit`: tests/unit; grouped by module (their module fixtures are built once).
- `processes`: the rest of tests/integration, on the one-host cluster of whichever worker runs
  them; a test is its own unit of work unless its module shares a fixture between its tests
  (a module-scoped fixture), then the module is.

EXPECTED_S are measured durations (a fresh clone's CI run, 2 cores) of the slowest one-host
tests: the scheduler starts the longest first so that none starts last and keeps the session
waiting. They are hints only: a wrong or missing figure costs balance, never correctness.
"""

from __future__ import annotations

LANES = ("multihost", "secure", "unit", "processes")  # the order work is queued in
DEFAULT_INTEGRATION_S = 20.0

EXPECTED_S: dict[str, float] = {}


def lane_of(path: str) -> str:
    """A test's lane from its file path (absolute, or relative to the checkout)."""
    path = "/" + path.replace("\\", "/").lstrip("/")
    if "/tests/unit/" in path:
        return "unit"
    if "/tests/integration/multihost/" in path:
        return "multihost"
    if "/tests/integration/secure/" in path:
        return "secure"
    return "processes"


def _module(item) -> str:
    return item.nodeid.split("::", 1)[0]


def xdist_group(item, lane: str) -> str | None:
    """The group the item is scheduled with (None: on its own)."""
    if lane in ("multihost", "secure"):
        return lane
    if lane == "unit":
        return _module(item)
    shared = any(getattr(fixturedef, "scope", None) in ("module", "package")
                 for fixturedefs in item._fixtureinfo.name2fixturedefs.values() for fixturedef in fixturedefs
                 if fixturedef.baseid.startswith(_module(item)))
    return _module(item) if shared else None


def expected_seconds(item) -> float:
    if lane_of(str(item.fspath)) == "unit":
        return 0.0
    name = item.nodeid.split("@", 1)[0]
    base = name.split("[", 1)[0]
    return EXPECTED_S.get(name, EXPECTED_S.get(base, DEFAULT_INTEGRATION_S))
