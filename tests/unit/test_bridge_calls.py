"""Every call Python makes into the JVM names a public method the Java side has.

Py4J resolves a method by name only when it is called, so a Java method renamed or dropped
would otherwise surface only when the integration tier's job reaches that call (40 minutes in,
or never for a rare path). This reads the Java bridge classes' public methods from their source
and every attribute Python takes from a bridge object (`bridge.X`, `gw.bridge.X`, `fs.X`, …),
with which class each receiver is, and fails in a second on a name the class lacks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tony_py import paths

pytestmark = pytest.mark.unit

JAVA = paths.SOURCE_ROOT / "jvm" / "src" / "main" / "java" / "io" / "tonypy"
PACKAGE = paths.PACKAGE_DIR
# The top-level class's own methods (two spaces in: the house style), not its nested classes'.
PUBLIC_METHOD = re.compile(r"^  public\s+(?:static\s+)?(?:final\s+)?(?:synchronized\s+)?[\w<>\[\], ?]+\s+(\w+)\s*\(",
                           re.M)
# Which Java class a Python receiver is: the AM's bridge in tony_py/am, the client's elsewhere;
# a file system is FsBridge wherever it is.
BRIDGE_CLASS = {"am": "am/AmBridge.java"}
CLIENT_BRIDGE = "client/ClientBridge.java"
FS_CLASS = "bridge/FsBridge.java"


def java_methods(relative: str) -> set[str]:
    return set(PUBLIC_METHOD.findall((JAVA / relative).read_text()))


def receiver_class(module: Path, receiver: str) -> str | None:
    """The Java class behind a receiver expression, or None for one that is not a bridge."""
    last = receiver.split(".")[-1]
    if last == "fs":
        return FS_CLASS
    if last == "bridge":
        return BRIDGE_CLASS.get(module.relative_to(PACKAGE).parts[0], CLIENT_BRIDGE)
    return None


def bridge_calls() -> list[tuple[str, str, str, str]]:
    """(module, receiver, attribute, Java class) for every attribute taken from a bridge."""
    calls = []
    for module in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Attribute):
                receiver = ast.unparse(node.value)
                java = receiver_class(module, receiver)
                if java is not None:
                    calls.append((str(module.relative_to(PACKAGE)), receiver, node.attr, java))
    return calls


def test_the_scan_finds_the_bridges_calls_on_every_side():
    """A scan that found nothing would pass whatever Java did: it must see each class in use."""
    calls = bridge_calls()
    assert {java for *_, java in calls} == {BRIDGE_CLASS["am"], CLIENT_BRIDGE, FS_CLASS}
    assert ("client/submission.py", "self.gw.bridge", "submit", CLIENT_BRIDGE) in calls
    assert ("am/yarn.py", "self.bridge", "launch", BRIDGE_CLASS["am"]) in calls
    assert len(calls) > 60


def test_every_bridge_call_from_python_names_a_public_java_method():
    methods = {java: java_methods(java) for java in (BRIDGE_CLASS["am"], CLIENT_BRIDGE, FS_CLASS)}
    missing = [f"{module}: {receiver}.{attr} (no public {attr} in {java})"
               for module, receiver, attr, java in bridge_calls() if attr not in methods[java]]
    assert not missing, "\n".join(missing)


def test_the_classes_python_constructs_exist():
    """The JVM classes Python names by package path (the client's bridge, the AM's entry point)."""
    named = set()
    for module in PACKAGE.rglob("*.py"):
        named.update(re.findall(r"\bio\.tonypy\.((?:\w+\.)*[A-Z]\w+)", module.read_text()))
    assert named, "no class named: the scan is broken"
    for dotted in named:
        assert (JAVA / (dotted.replace(".", "/") + ".java")).is_file(), f"io.tonypy.{dotted} has no source"
