"""How many tests each lane must run, taken from the tree, and whether a run ran them all.

`.ci/run` (through scripts/test, TONY_TEST_CENSUS=FILE) first takes the census, in a process of
its own: pytest collects the whole of tests/ with no selection (`--collect-only`), and

- every test it collects is written to FILE, by lane (tests/lanes.py);
- a module skipped at collection (`pytest.skip(allow_module_level=True)`, `importorskip`) or one
  that fails to import is refused: its tests would vanish from every later count;
- a file under tests/ that defines tests (a `test_*` function, or a `Test*` class with `test_*`
  methods) but had none collected is refused: a file renamed out of `test_*.py`, or a directory
  pytest no longer looks in.

Then the suite runs with TONY_TEST_MANIFEST=FILE, and tests/conftest.py compares what each lane
ran against it (`shortfall`): a lane that ran fewer tests than the tree holds fails the session,
with the missing tests named. Nothing here is a number typed in.

Run by hand: `python tests/census.py OUT.json` (exit 1 on a refused module or file).
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
sys.path.insert(0, str(TESTS))
from lanes import LANES, lane_of  # noqa: E402


def files_defining_tests(tests: Path = TESTS) -> set[str]:
    """Files under `tests` (relative to the checkout) whose module defines a test by pytest's
    default naming: a top-level `test_*` function, or a `Test*` class holding a `test_*` method."""
    found = set()
    for path in sorted(tests.rglob("*.py")):
        if any(part.startswith(".") or part == "__pycache__" for part in path.relative_to(tests).parts):
            continue
        name = str(path.relative_to(tests.parent))  # as pytest's node ids name it, from the rootdir
        try:
            tree = ast.parse(path.read_text(), str(path))
        except SyntaxError:
            found.add(name)  # pytest will report it; it must not vanish
            continue
        if any(_defines_test(node) for node in tree.body):
            found.add(name)
    return found


def _defines_test(node: ast.stmt) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node.name.startswith("test")
    if isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
        return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name.startswith("test")
                   for n in node.body)
    return False


class _Collector:
    """A pytest plugin for the census' own session: what was collected, skipped and broken."""

    def __init__(self):
        self.nodeids: list[str] = []
        self.refused: list[str] = []

    def pytest_collectreport(self, report):
        if report.skipped:
            longrepr = report.longrepr
            reason = (longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)).removeprefix("Skipped: ")
            self.refused.append(f"{report.nodeid}: skipped at collection ({reason}); a skip must be a test's "
                                "own, for missing hardware only")
        elif report.failed:
            self.refused.append(f"{report.nodeid}: could not be collected:\n{report.longreprtext[-1500:]}")

    def pytest_collection_finish(self, session):
        self.nodeids = [item.nodeid for item in session.items]


def take(out: Path, tests: Path = TESTS) -> list[str]:
    """Collect the tree, write the census to `out`, and return what it refuses (empty: all good)."""
    import pytest

    collector = _Collector()
    with contextlib.redirect_stdout(io.StringIO()):  # a line per test; what matters is reported below
        code = pytest.main(["--collect-only", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", str(tests)],
                           plugins=[collector])
    refused = list(collector.refused)
    if code not in (pytest.ExitCode.OK,) and not refused:
        refused.append(f"pytest's collection ended with exit code {int(code)}")
    collected_files = {nodeid.split("::", 1)[0] for nodeid in collector.nodeids}
    for path in sorted(files_defining_tests(tests) - collected_files):
        refused.append(f"{path}: defines tests but none was collected (pytest collects tests/**/test_*.py)")
    by_lane: dict[str, list[str]] = {lane: [] for lane in LANES}
    for nodeid in collector.nodeids:
        by_lane[lane_of(nodeid.split("::", 1)[0])].append(nodeid)
    for lane, nodeids in by_lane.items():
        if not nodeids:
            refused.append(f"lane {lane}: the tree holds no test for it")
    out.write_text(json.dumps({"lanes": by_lane}, indent=1))
    return refused


def load(manifest: Path) -> dict[str, list[str]]:
    return json.loads(manifest.read_text())["lanes"]


def shortfall(expected: dict[str, list[str]], ran: set[str]) -> dict[str, list[str]]:
    """{lane: the tests of the census that reported no outcome}, for lanes that ran fewer."""
    missing = {lane: [n for n in nodeids if n not in ran] for lane, nodeids in expected.items()}
    return {lane: nodeids for lane, nodeids in missing.items() if nodeids}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python tests/census.py OUT.json", file=sys.stderr)
        return 2
    out = Path(argv[0])
    refused = take(out)
    counts = ", ".join(f"{lane} {len(n)}" for lane, n in load(out).items())
    if refused:
        print("census: the tree's tests cannot all be counted:", file=sys.stderr)
        for line in refused:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"census: {counts} tests (written to {out})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
