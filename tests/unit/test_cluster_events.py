"""The cluster events' one schema (tony_py/am/cluster_events.py) against the sides that make
them, and the job loop's table of what each does (tony_py/am/runtime.py).

The JVM's events are JSON objects AmBridge.java fills by hand (`emit("kind", body)` after
`body.put("key", …)` calls), and Python reads them only when a job's RM or NodeManager says
that thing: a key renamed on one side would surface on a cluster, maybe never in CI (a
preemption, a lost node, an RM fail-over). This reads the Java source instead, and fails in a
second when a kind or a key differs from the dataclasses.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import logging
import re
import time
import typing
from pathlib import Path
from types import SimpleNamespace

import pytest

from tony_py import paths
from tony_py.am import runtime
from tony_py.am.cluster_events import EVENTS, ClusterEvent, EventError, parse_event
from tony_py.am.core.coordinator import Coordinator
from tony_py.am.local import LocalProcessPort
from tony_py.config.model import Checked

pytestmark = pytest.mark.unit

AM_BRIDGE = paths.SOURCE_ROOT / "jvm" / "src" / "main" / "java" / "io" / "tonypy" / "am" / "AmBridge.java"
EMIT = re.compile(r'\bemit\("(\w+)",')
EMIT_CONTAINER = re.compile(r'\bemitContainer\("(\w+)",\s*\w+,\s*(\w+)\)')
PUT = re.compile(r'\b(\w+)\.put\("([\w.-]+)"')
# A method's first line (the house style keeps signatures on one line).
METHOD = re.compile(r"^\s+(?:(?:public|private|protected|static|final|synchronized)\s+)+[\w<>\[\], .?]+\s+(\w+)\s*"
                    r"\([^;{]*\)\s*(?:throws\s+[\w., ]+)?\{\s*$", re.M)


@dataclasses.dataclass(frozen=True)
class Shape:
    keys: frozenset[str]  # the event's own keys, the envelope's (type, time_ms) included
    nested: frozenset[str] = frozenset()  # the keys of the objects in it (a container, a node)


# ---- the Java side -------------------------------------------------------------------------------
def _method(source: str, name: str) -> str:
    starts = [(m.start(), m.group(1)) for m in METHOD.finditer(source)]
    for i, (start, found) in enumerate(starts):
        if found == name:
            return source[start:starts[i + 1][0] if i + 1 < len(starts) else len(source)]
    raise AssertionError(f"no method {name} in AmBridge.java: the scan is broken")


def _enclosing(source: str, at: int) -> str:
    """From the start of the method an emit stands in, to the emit."""
    start = max((m.start() for m in METHOD.finditer(source) if m.start() < at), default=0)
    return source[start:at]


def _nested_keys(region: str, source: str) -> frozenset[str]:
    keys = {key for var, key in PUT.findall(region) if var != "body"}
    if re.search(r"\bdescribe\(", region):
        keys |= {key for _, key in PUT.findall(_method(source, "describe"))}
    return frozenset(keys)


def java_events(source: str) -> dict[str, Shape]:
    """Each kind AmBridge emits, with the keys its body gets."""
    envelope = {key for _, key in PUT.findall(_method(source, "emit"))}
    out: dict[str, Shape] = {}
    for m in EMIT.finditer(source):
        region = _enclosing(source, m.start())
        keys = {key for var, key in PUT.findall(region) if var == "body"}
        out[m.group(1)] = Shape(frozenset(keys | envelope), _nested_keys(region, source))
    helper = _method(source, "emitContainer")
    conditional = re.search(r"if \(error != null\) \{(.*?)\}", helper, re.S)
    optional = {key for _, key in PUT.findall(conditional.group(1))} if conditional else set()
    always = {key for var, key in PUT.findall(helper) if var == "body"} - optional
    for m in EMIT_CONTAINER.finditer(source):
        keys = always | (optional if m.group(2) != "null" else set())
        out[m.group(1)] = Shape(frozenset(keys | envelope))
    return out


# ---- the Python side -----------------------------------------------------------------------------
def _part(hint) -> type | None:
    """The dataclass a field holds (itself or a tuple of them), if any."""
    inner = typing.get_args(hint)[0] if typing.get_origin(hint) is tuple else hint
    return inner if isinstance(inner, type) and issubclass(inner, Checked) else None


def schema_shape(cls: type[ClusterEvent]) -> Shape:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    nested = [part for f in fields if (part := _part(hints[f.name])) is not None]
    assert len(nested) <= 1, f"{cls.__name__}: the scan compares one nested part per event"
    return Shape(frozenset({"type"} | {f.name for f in fields}),
                 frozenset(f.name for f in dataclasses.fields(nested[0])) if nested else frozenset())


def python_emitted() -> set[str]:
    """The kinds Python code outside the schema builds (local.py's, yarn.py's)."""
    by_name = {cls.__name__: kind for kind, cls in EVENTS.items()}
    kinds = set()
    for module in paths.PACKAGE_DIR.rglob("*.py"):
        if module.name == "cluster_events.py":
            continue
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name in by_name:
                    kinds.add(by_name[name])
    return kinds


def mismatches(source: str) -> list[str]:
    java, emitted = java_events(source), python_emitted()
    out = [f"AmBridge.java emits {kind!r}, which cluster_events.py lacks" for kind in sorted(set(java) - set(EVENTS))]
    out += [f"cluster_events.py has {kind!r}, which neither AmBridge.java nor Python emits"
            for kind in sorted(set(EVENTS) - set(java) - emitted)]
    for kind in sorted(set(java) & set(EVENTS)):
        ours, theirs = schema_shape(EVENTS[kind]), java[kind]
        for what, a, b in (("keys", ours.keys, theirs.keys), ("keys inside", ours.nested, theirs.nested)):
            if a != b:
                out.append(f"{kind!r}: {what}: Java only {sorted(b - a)}, Python only {sorted(a - b)}")
    return out


# ---- the schema against AmBridge.java -----------------------------------------------------------
def test_the_scan_reads_every_kind_and_its_keys():
    """A scan that found nothing would pass whatever Java did."""
    java = java_events(AM_BRIDGE.read_text())
    assert len(java) >= 13
    assert java["completed"].keys == {"type", "time_ms", "container_id", "exit_status", "state", "diagnostics"}
    assert {"id", "node_id", "allocation_request_id"} <= java["allocated"].nested == java["previous_containers"].nested
    assert java["nodes_updated"].nested == {"node_id", "state"}
    assert java["start_failed"].keys == java["started"].keys | {"message"}
    assert java["shutdown_request"].keys == {"type", "time_ms"}
    assert {"Allocated", "Started", "Completed"} <= {EVENTS[k].__name__ for k in python_emitted()}


def test_the_schema_matches_what_ambridge_emits():
    problems = mismatches(AM_BRIDGE.read_text())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("edit,expected", [
    (('body.put("exit_status"', 'body.put("exit_code"'), "'completed': keys: Java only ['exit_code'], "
                                                         "Python only ['exit_status']"),
    (('m.put("node_http"', 'm.put("node_url"'), "'allocated': keys inside: Java only ['node_url']"),
    (('m.put("state"', 'm.put("health"'), "'nodes_updated': keys inside"),
    (('emit("rm_back"', 'emit("rm_returned"'), "AmBridge.java emits 'rm_returned'"),
    (('emit("rm_back"', 'emit("rm_returned"'), "cluster_events.py has 'rm_back', which neither"),
    (('emitContainer("stop_failed", id, t)', 'emitContainer("stop_failed", id, null)'),
     "'stop_failed': keys: Java only [], Python only ['message']"),
    (('body.put("wait_ms", conf', 'body.put("wait_ms", conf);\n      body.put("strict", conf'),
     "'preemption': keys: Java only ['strict']"),
])
def test_a_changed_copy_of_ambridge_fails(edit, expected):
    source = AM_BRIDGE.read_text()
    assert edit[0] in source, "the edit no longer applies: update the test"
    problems = mismatches(source.replace(edit[0], edit[1], 1))
    assert any(expected in p for p in problems), problems


def test_every_kind_has_its_handler_in_the_job_loop():
    assert set(runtime.HANDLERS) == set(EVENTS.values())


# ---- the dataclasses -----------------------------------------------------------------------------
def sample(hint):
    """A value of the field's type, as a JSON round trip gives it back."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or type(None) in args:
        return sample(next(a for a in args if a is not type(None)))
    if origin is tuple:
        return (sample(args[0]), sample(args[0]))
    if origin is dict:
        return {"vcores": 2, "memory-mb": 1024}
    if isinstance(hint, type) and issubclass(hint, Checked):
        hints = typing.get_type_hints(hint)
        return hint(**{f.name: sample(hints[f.name]) for f in dataclasses.fields(hint)})
    return {int: 7, str: "x"}[hint]


def an_event(cls: type[ClusterEvent]) -> ClusterEvent:
    return sample(cls)


@pytest.mark.parametrize("kind", sorted(EVENTS))
def test_each_event_round_trips_through_json(kind):
    event = an_event(EVENTS[kind])
    wire = json.loads(json.dumps(event.wire()))
    assert wire["type"] == kind
    assert parse_event(wire) == event
    assert EVENTS[kind].parse(wire) == event


@pytest.mark.parametrize("kind", sorted(EVENTS))
def test_a_bad_field_is_refused_naming_the_kind_and_the_field(kind):
    wire = an_event(EVENTS[kind]).wire()
    for name, value in wire.items():
        if name == "type":
            continue
        bad = dict(wire, **{name: "x" if isinstance(value, (dict, list, int)) else [1]})
        with pytest.raises(EventError, match=rf"cluster event '{kind}'.*{kind}\.{name}"):
            parse_event(bad)
        with pytest.raises(EventError, match=rf"cluster event '{kind}'.*missing key\(s\) {name}"):
            parse_event({k: v for k, v in wire.items() if k != name})
    with pytest.raises(EventError, match=rf"cluster event '{kind}'.*unknown key\(s\) surprise"):
        parse_event(dict(wire, surprise=1))


def test_a_bad_value_inside_a_container_names_its_path():
    wire = an_event(EVENTS["allocated"]).wire()
    wire["container"]["resource"]["vcores"] = "two"
    with pytest.raises(EventError, match=r"allocated\.container\.resource\['vcores'\]: expected a whole number"):
        parse_event(wire)


def test_an_unknown_kind_is_none_and_a_shapeless_one_an_error():
    assert parse_event({"type": "containers_updated", "time_ms": 1}) is None
    for bad in ({"container_id": "c1"}, ["allocated"], {"type": 3}):
        with pytest.raises(EventError, match="string 'type'"):
            parse_event(bad)


# ---- the job loop's table: today's calls, one per kind -------------------------------------------
class Recorder:
    """Notes the coordinator's calls; each must fit the real method's signature."""

    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        def call(*args):
            inspect.signature(getattr(Coordinator, name)).bind(self, *args)
            self.calls.append((name, *args))
        return call


def dispatched(kind: str, **fields) -> list[tuple]:
    c = Recorder()
    runtime.dispatch(c, dict(an_event(EVENTS[kind]).wire(), **fields))
    return c.calls


def test_dispatch_calls_the_coordinator_as_before():
    container = an_event(EVENTS["allocated"]).wire()["container"]
    assert dispatched("allocated") == [("on_allocated", container)]
    assert dispatched("started", container_id="c1") == [("on_started", "c1")]
    assert dispatched("start_failed", container_id="c1", message="m") == [("on_start_failed", "c1", "m")]
    assert dispatched("completed", container_id="c1", exit_status=-100, diagnostics=None) == [
        ("on_completed", "c1", -100, "")]
    assert dispatched("rm_back", silent_ms=1500) == [("on_rm_back", 1.5)]
    assert dispatched("nodes_updated", nodes=[{"node_id": "n:1", "state": "LOST"}]) == [
        ("on_nodes_updated", [{"node_id": "n:1", "state": "LOST"}])]
    assert dispatched("preemption", containers=["c1", "c2"], wait_ms=15000) == [("on_preemption", ["c1", "c2"], 15000)]
    assert dispatched("previous_containers", containers=[container]) == [("on_previous_containers", [container])]
    assert dispatched("requests_rejected", allocation_request_id=3, reason="r") == [("on_requests_rejected", 3, "r")]
    assert dispatched("stopped") == dispatched("stop_failed") == []
    refused = dispatched("rm_error", message="InvalidResourceRequestException: placement constraints are disabled")
    assert refused == [("fail_job", runtime.placement_refused(
        "InvalidResourceRequestException: placement constraints are disabled"))]


def test_dispatch_abandons_the_attempt_when_the_rm_is_gone_or_asks():
    with pytest.raises(runtime.Abandon, match="lost the ResourceManager: connection refused"):
        dispatched("rm_error", message="connection refused")
    with pytest.raises(runtime.Abandon, match="asked this AM attempt to shut down"):
        dispatched("shutdown_request")


def test_dispatch_skips_an_unknown_kind_and_refuses_a_malformed_one(caplog):
    c = Recorder()
    with caplog.at_level(logging.WARNING, logger="tony.am"):
        runtime.dispatch(c, {"type": "containers_updated", "time_ms": 1})
    assert c.calls == [] and "unknown event" in caplog.text
    with pytest.raises(EventError, match="'completed'.*exit_status"):
        runtime.dispatch(c, dict(an_event(EVENTS["completed"]).wire(), exit_status="1"))
    assert c.calls == []


# ---- local.py's events, read by the same schema ---------------------------------------------------
def test_local_containers_make_the_events_the_schema_reads(tmp_path: Path):
    events: list[dict] = []
    port = LocalProcessPort(tmp_path, "h", events.append, lambda name, r: tmp_path / name, "s" * 64, prefix="t")
    port.request(4, SimpleNamespace(resources=SimpleNamespace(memory_mb=512, vcores=1, gpus=0)), 1)
    allocated = parse_event(events[0])
    assert allocated.container.id == "container_t_000001" and allocated.container.allocation_request_id == 4
    port.launch(allocated.container.id, {"commands": ["exit 3"]})
    deadline = time.monotonic() + 10
    while len(events) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    started, completed = (parse_event(e) for e in events[1:3])
    assert (started.KIND, started.container_id) == ("started", allocated.container.id)
    assert (completed.KIND, completed.exit_status, completed.diagnostics) == ("completed", 3, "")
