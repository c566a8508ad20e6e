"""Every call Python makes into the JVM names a public method the Java side has, with as many
arguments as one of its overloads takes, each of a type it accepts.

Py4J resolves a method by name, argument count and argument types only when it is called, so a
Java method renamed, dropped or given another parameter would otherwise surface only when the
integration tier's job reaches that call (40 minutes in, or never for a rare path). This reads
the Java bridge classes' public methods and their parameter types from their source, and every
attribute Python takes from a bridge object (`bridge.X`, `gw.bridge.X`, `fs.X`, …), with which
class each receiver is and the arguments it is called with: directly (`bridge.launch(a, b)`) or
through the gateway's error wrapper (`gw.call("what", gw.fs.mkdirs, path, 0o700)`). An argument
whose type the source shows (a literal, an f-string, `json.dumps(…)`, `int(…)`, …) must suit the
Java parameter; one it cannot show is checked for its count only.
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


def java_signatures(relative: str) -> dict[str, list[list[str]]]:
    """{method: [the parameter types of each overload]} of the class's own public methods."""
    text = (JAVA / relative).read_text()
    signatures: dict[str, list[list[str]]] = {}
    for match in PUBLIC_METHOD.finditer(text):
        params, depth, i = "", 0, match.end()
        while depth >= 0:  # to the ')' that closes the parameter list (generics hold no parentheses)
            char = text[i]
            depth += {"(": 1, ")": -1}.get(char, 0)
            params += char if depth >= 0 else ""
            i += 1
        signatures.setdefault(match.group(1), []).append(parameter_types(params))
    return signatures


def parameter_types(params: str) -> list[str]:
    """`long id, java.util.List<String> add, final String s` -> ["long", "List", "String"]."""
    types, depth, current = [], 0, ""
    for char in params + ",":
        depth += {"<": 1, ">": -1}.get(char, 0)
        if char == "," and depth == 0:
            if current.strip():
                declared = re.sub(r"<.*>", "", current.strip().removeprefix("final ")).rsplit(None, 1)[0]
                types.append(declared.rsplit(".", 1)[-1])
            current = ""
        else:
            current += char
    return types


# What a Python value of a type the source shows may be passed as (Py4J's conversions)
ACCEPTS = {
    "str": {"String", "Object", "CharSequence"},
    "int": {"int", "long", "short", "byte", "Integer", "Long", "Object", "float", "double"},
    "float": {"float", "double", "Float", "Double", "Object"},
    "bool": {"boolean", "Boolean", "Object"},
    "None": {"String", "Object", "List", "Integer", "Long", "Boolean", "String[]"},
}
# calls whose result's type is plain from their name
RESULT_TYPE = {"str": "str", "json.dumps": "str", "int": "int", "float": "float", "bool": "bool", "len": "int",
               "round": "int"}


def python_type(arg: ast.expr, annotated: dict[str, str] | None = None) -> str | None:
    """The Python type of an argument where the source alone shows it (a literal, a call whose
    result type is plain, a parameter of the enclosing function annotated `str`, `int | None`, …),
    else None."""
    if isinstance(arg, ast.Name):
        return (annotated or {}).get(arg.id)
    if isinstance(arg, ast.Constant):
        return "None" if arg.value is None else type(arg.value).__name__
    if isinstance(arg, ast.JoinedStr):
        return "str"
    if isinstance(arg, ast.Call):
        return RESULT_TYPE.get(ast.unparse(arg.func))
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod) and python_type(arg.left) == "str":
        return "str"
    return None


def annotated_parameters(node: ast.AST, parents: dict) -> dict[str, str]:
    """{parameter: plain type} of the function enclosing `node`, from its annotations."""
    while node is not None and not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        node = parents.get(node)
    if node is None:
        return {}
    plain = {}
    for arg in node.args.args + node.args.kwonlyargs:
        parts = {p.strip() for p in ast.unparse(arg.annotation).split("|")} - {"None"} if arg.annotation else set()
        if len(parts) == 1 and (kind := parts.pop()) in ACCEPTS:
            plain[arg.arg] = kind
    return plain


def call_arguments(node: ast.Attribute, parents: dict) -> list[ast.expr] | None:
    """The arguments the bridge method `node` is called with, or None where it is only named."""
    parent = parents.get(node)
    if isinstance(parent, ast.Call) and parent.func is node:
        return parent.args
    if isinstance(parent, ast.Call) and ast.unparse(parent.func).endswith(".call") and node in parent.args:
        return parent.args[parent.args.index(node) + 1:]  # gw.call("what", fn, *args)
    return None


# Task-side modules: their `fs` is an fsspec file system (tony_py/hdfs.py), never the JVM's.
TASK_SIDE = {"hdfs.py", "data.py", "checkpoint.py", "task.py"}


def receiver_class(module: Path, receiver: str) -> str | None:
    """The Java class behind a receiver expression, or None for one that is not a bridge."""
    if module.relative_to(PACKAGE).as_posix() in TASK_SIDE:
        return None
    last = receiver.split(".")[-1]
    if last == "fs":
        return FS_CLASS
    if last == "bridge":
        return BRIDGE_CLASS.get(module.relative_to(PACKAGE).parts[0], CLIENT_BRIDGE)
    return None


def bridge_calls() -> list[tuple[str, str, str, str]]:
    """(module, receiver, attribute, Java class) for every attribute taken from a bridge."""
    return [call[:4] for call in bridge_calls_with_arguments()]


def bridge_calls_with_arguments() -> list[tuple[str, str, str, str, list[ast.expr] | None, int, dict]]:
    """As bridge_calls, with the call's arguments (None: named, not called here), its line and
    the enclosing function's annotated parameters."""
    calls = []
    for module in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(module.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                receiver = ast.unparse(node.value)
                java = receiver_class(module, receiver)
                if java is not None:
                    calls.append((str(module.relative_to(PACKAGE)), receiver, node.attr, java,
                                  call_arguments(node, parents), node.lineno, annotated_parameters(node, parents)))
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


def test_every_bridge_call_passes_as_many_arguments_as_java_takes_of_types_it_accepts():
    signatures = {java: java_signatures(java) for java in (BRIDGE_CLASS["am"], CLIENT_BRIDGE, FS_CLASS)}
    wrong, checked, typed = [], 0, 0
    for module, receiver, attr, java, args, line, annotated in bridge_calls_with_arguments():
        overloads = signatures[java].get(attr)
        if args is None or overloads is None:  # named only, or a missing method (the test above)
            continue
        where = f"{module}:{line}: {receiver}.{attr}"
        if any(isinstance(a, ast.Starred) for a in args):
            wrong.append(f"{where} passes *args: the count cannot be checked")
            continue
        checked += 1
        matching = [params for params in overloads if len(params) == len(args)]
        if not matching:
            wrong.append(f"{where} passes {len(args)} argument(s); Java takes {' or '.join(map(str, overloads))}")
            continue
        for index, arg in enumerate(args):
            kind = python_type(arg, annotated)
            if kind is None:
                continue
            typed += 1
            if not any(params[index] in ACCEPTS[kind] for params in matching):
                wrong.append(f"{where} argument {index + 1} ({ast.unparse(arg)}) is a Python {kind}; Java wants "
                             f"{' or '.join(params[index] for params in matching)}")
    assert not wrong, "\n".join(wrong)
    # a scan that checked nothing would pass whatever Java did
    assert checked > 60 and typed > 40, (checked, typed)


def test_the_signature_reader_reads_what_java_declares():
    """Multi-line parameter lists, generics with commas, arrays and fully qualified names."""
    am = java_signatures(BRIDGE_CLASS["am"])
    assert am["request"] == [["long", "int", "long", "int", "long", "String", "int"]]
    assert am["updateBlacklist"] == [["List", "List"]]
    assert am["applicationId"] == [[]]
    assert java_signatures(CLIENT_BRIDGE)["fetchAggregatedLog"] == [["String"] * 5]
    assert parameter_types("java.util.Map<String, List<Long>> m, final int[] xs") == ["Map", "int[]"]
