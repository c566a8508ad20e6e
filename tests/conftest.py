"""The test session's layout: markers by location, lanes that run side by side, and what CI
refuses.

Markers by location: tests/unit are `unit`, tests/integration are `integration`.

Lanes (tests/lanes.py): `multihost` (the Docker cluster), `secure` (the Kerberos cluster),
`unit` (pure logic) and `processes` (the one-host cluster). `scripts/test` runs the suite with
pytest-xdist (`-n N --dist loadscope`, scheduled by lane here): the Docker and the Kerberos lanes
are one unit of work each (one worker, one cluster each), every other test goes to whichever
worker is free, and each worker that runs one-host tests brings up a one-host cluster of its
own, once. Most of an integration
test is waiting on YARN's and TonY-py's timers, so the lanes share the two cores well. The long
lanes are queued first, then the unit tier, then the one-host tests longest first. Without
xdist (`-p no:xdist`, `-n 0`) the unit tier runs first and the Docker node image builds in the
background meanwhile.

With TONY_TEST_NO_SKIPS=1 (`.ci/run`), a skipped test fails the session unless it carries the
`gpu` marker itself and `nvidia-smi` finds no device on this machine (tests/skips.py); those are
listed at the end. A module skipped at collection fails it always: its tests would vanish.

With TONY_TEST_MANIFEST=FILE (`.ci/run`, from tests/census.py), every test of the tree's census
must report an outcome: a lane that ran fewer fails the session, with the missing tests named.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

import census
import skips
from lanes import LANES, expected_seconds, lane_of, lane_scheduler, work_unit

NO_SKIPS_ENV = skips.NO_SKIPS_ENV
MANIFEST_ENV = "TONY_TEST_MANIFEST"


@pytest.hookimpl(tryfirst=True)  # before -m selects by these markers
def pytest_collection_modifyitems(config, items):
    for item in items:
        lane = lane_of(str(item.fspath))
        item.add_marker(pytest.mark.unit if lane == "unit" else pytest.mark.integration)
    if _distributed(config):
        # the scheduler hands out units of work in this order: the long lanes first, then the
        # unit tier, then the one-host tests and modules longest first (a unit keeps its order)
        order = {lane: rank for rank, lane in enumerate(LANES)}
        units = {item: work_unit(item.nodeid) for item in items}
        totals: dict[str, float] = {}
        for item, unit in units.items():
            totals[unit] = totals.get(unit, 0.0) + expected_seconds(item)
        position = {item: index for index, item in enumerate(items)}
        items.sort(key=lambda item: (order[lane_of(str(item.fspath))], -totals[units[item]], units[item],
                                     position[item]))
    else:
        items.sort(key=lambda item: 0 if lane_of(str(item.fspath)) == "unit" else 1)


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector):
    """Under TONY_TEST_NO_SKIPS=1 a module skipped at collection is a collection error (under
    xdist the controller never sees a skipped collection report, only a failed one)."""
    outcome = yield
    skips.refuse_collection_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Marks the reports of a test that carries the `gpu` marker itself (not a keyword that
    happens to read "gpu"): they travel from xdist's workers as user properties."""
    outcome = yield
    skips.mark_gpu_test(item, outcome.get_result())


@pytest.hookimpl(tryfirst=True, optionalhook=True)  # (no such hook without xdist: -p no:xdist)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadscope` (scripts/test) schedules by lane: tests/lanes.py."""
    return lane_scheduler(config, log)


def _distributed(config) -> bool:
    """On an xdist worker (or its controller) rather than a plain serial run."""
    return hasattr(config, "workerinput") or bool(getattr(config.option, "numprocesses", 0))


def pytest_collection_finish(session):
    """A serial run builds the Docker node image in the background while the unit tier runs.
    (Under xdist the worker that takes the Docker lane builds it first thing.)"""
    if _distributed(session.config) or session.config.option.collectonly:
        return
    if any(lane_of(str(item.fspath)) == "multihost" for item in session.items):
        _BUILDS.append(_build_node_image_in_background())


_BUILDS: list = []


def _build_node_image_in_background() -> "threading.Thread | None":
    """The multi-host fixture's own ensure_image() waits for this build (a lock file) and reports
    its error if it failed; here a failure is only left for that call to meet again."""
    from tony_py.cluster.engine import engine_available
    from tony_py.cluster.image import ensure_image

    if not engine_available()[0]:
        return None

    def build():
        try:
            ensure_image(log=lambda line: None)
        except Exception:  # noqa: BLE001 - the fixture's own call says what went wrong
            pass

    thread = threading.Thread(target=build, name="node-image-build", daemon=True)
    thread.start()
    return thread


# ---- per-lane times and skips, on the controller (or the one process of a serial run) ---------------
class _Lanes:
    def __init__(self):
        self.first: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.busy: dict[str, float] = {}
        self.count: dict[str, dict[str, int]] = {}
        self.skips: list[tuple[str, str, bool]] = []  # (nodeid, reason, marked gpu)
        self.ran: set[str] = set()  # tests that reported an outcome (of their call, or a setup's)
        self.started = time.time()

    def add(self, report) -> None:
        lane = lane_of(report.nodeid.split("::", 1)[0])
        self.first[lane] = min(self.first.get(lane, report.start), report.start)
        self.last[lane] = max(self.last.get(lane, report.stop), report.stop)
        self.busy[lane] = self.busy.get(lane, 0.0) + report.duration
        counts = self.count.setdefault(lane, {})
        if report.when == "call" or report.outcome != "passed":
            outcome = "failed" if report.failed else report.outcome
            counts[outcome] = counts.get(outcome, 0) + 1
            self.ran.add(report.nodeid)
        if report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, (tuple, list)) else str(report.longrepr)
            self.skips.append((report.nodeid, reason, skips.marked_gpu(report)))

    def shortfall(self) -> dict[str, list[str]]:
        """The census' tests that reported nothing, by lane ({} without a census)."""
        manifest = os.environ.get(MANIFEST_ENV)
        return census.shortfall(census.load(Path(manifest)), self.ran) if manifest else {}


_LANES = _Lanes()


def pytest_runtest_logreport(report):
    if os.environ.get("PYTEST_XDIST_WORKER") is None:  # the controller, or a serial run
        _LANES.add(report)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if hasattr(config, "workerinput"):
        return
    write = terminalreporter.write_line
    manifest = os.environ.get(MANIFEST_ENV)
    expected = census.load(Path(manifest)) if manifest else {}
    if _LANES.first or expected:
        terminalreporter.section("time per lane")
        write(f"{'lane':<10} {'census':>7} {'tests':>24} {'test time':>10} {'wall':>8}")
        for lane in LANES:
            if lane not in _LANES.first and lane not in expected:
                continue
            counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(_LANES.count.get(lane, {}).items()))
            span = _LANES.last.get(lane, 0.0) - _LANES.first.get(lane, 0.0)
            census_n = str(len(expected[lane])) if lane in expected else "-"
            write(f"{lane:<10} {census_n:>7} {counts or 'none ran':>24} {_minutes(_LANES.busy.get(lane, 0.0)):>10} "
                  f"{_minutes(span):>8}")
        write(f"the whole session: {_minutes(time.time() - _LANES.started)} wall")
    short = _LANES.shortfall()
    if short:
        terminalreporter.section("ran fewer tests than the census holds", red=True)
        for lane, missing in short.items():
            write(f"{lane}: {len(missing)} of {len(expected[lane])} reported nothing, e.g.", red=True)
            for nodeid in missing[:15]:
                write(f"  {nodeid}", red=True)
    gpu = [(nodeid, reason) for nodeid, reason, marked in _LANES.skips if skips.exempt(marked, reason)]
    if gpu:
        terminalreporter.section("skipped: they need hardware this machine lacks")
        for nodeid, reason in gpu:
            write(f"{nodeid}: {reason}")
    if _refused_skips(config):
        terminalreporter.section(f"skipped, which {NO_SKIPS_ENV}=1 refuses", red=True)
        for nodeid, reason in _refused_skips(config):
            write(f"{nodeid}: {reason}", red=True)


def _refused_skips(config) -> list[tuple[str, str]]:
    if os.environ.get(NO_SKIPS_ENV) != "1":
        return []
    return [(nodeid, reason) for nodeid, reason, marked in _LANES.skips if not skips.exempt(marked, reason)]


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session, exitstatus):
    """A serial session that ends early (-x, Ctrl-C) lets the image build finish rather than
    orphan its mmdebstrap; the image is then there for the next run. A skip CI refuses, or a lane
    that ran fewer tests than the census holds, fails the session."""
    for build in _BUILDS:
        if build is not None:
            build.join(timeout=300)
    if not hasattr(session.config, "workerinput") and (_refused_skips(session.config) or _LANES.shortfall()) \
            and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}:{int(seconds % 60):02d}"
