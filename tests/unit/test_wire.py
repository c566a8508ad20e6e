"""The executor API's requests (tony_py/net/wire.py): what the executor sends is what the AM
parses, every bad value is refused naming its field, and a result the AM refuses goes again with
exactly the fields declared essential."""

import dataclasses
import json

import pytest

from tony_py.executor.channel import RequestRefused
from tony_py.executor.settings import Instruction, Settings
from tony_py.executor.supervisor import Executor
from tony_py.net import wire
from tony_py.net.wire import BadRequest

IDS = {"task": "worker:0", "attempt": 3, "container": "container_1_0001_01_000002"}
# every field set (flags true), so a round trip covers each one
EXAMPLES = [
    wire.Register(**IDS, port=2000, tb_port=2001, control_port=2002, gpus=["0", "GPU-1a2b"]),
    wire.SpecPoll(**IDS, timeout=12.5),
    wire.Started(**IDS, pid=4242),
    wire.Heartbeat(**IDS, metrics={"rss_mb": 512.0, "gpu_util": 93}, progress_age_s=4.5),
    wire.Callback(**IDS, info={"driver": "host1:4000", "n": [1, 2]}),
    wire.Tensorboard(**IDS, url="http://host1:6006"),
    wire.Result(**IDS, exit_code=-9, signal="SIGKILL", timed_out=True, fenced=True, preempted=True,
                stderr_tail="Traceback ...", error={"type": "ValueError", "message": "bad", "time": 12.0},
                ended_ago_s=1.5, metrics={"rss_mb": 1.0}),
    wire.AmMoved(url="http://am-host:4001"),
]


def test_every_request_class_has_an_example_and_a_route():
    classes = {type(e) for e in EXAMPLES}
    assert classes == set(wire.EXECUTOR_CALLS) | {wire.AmMoved}
    assert len({(c.METHOD, c.PATH) for c in classes}) == len(classes)


@pytest.mark.parametrize("request_", EXAMPLES, ids=lambda r: type(r).__name__)
def test_each_request_round_trips_through_its_json_body(request_):
    body = json.loads(json.dumps(request_.to_body()))  # as it crosses the wire
    assert type(request_).parse(body) == request_
    # every field was set, so every one travelled
    assert set(body) == {f.name for f in dataclasses.fields(request_)}


def test_the_spec_poll_round_trips_through_its_query():
    from urllib.parse import parse_qs, urlsplit

    poll = wire.SpecPoll(**IDS, timeout=7.0)
    target = urlsplit(poll.target())
    assert target.path == "/v1/spec"
    assert wire.SpecPoll.parse({k: v[0] for k, v in parse_qs(target.query).items()}) == poll


def test_absent_is_the_default_and_none_or_false_is_not_sent():
    result = wire.Result(**IDS, exit_code=0)
    assert result.to_body() == {**IDS, "exit_code": 0, "stderr_tail": ""}
    assert wire.Result.parse(result.to_body()) == result
    assert wire.Heartbeat.parse(IDS) == wire.Heartbeat(**IDS)
    assert wire.SpecPoll.parse({"task": "worker:0", "attempt": "0"}).timeout == 20.0  # a query's text


BAD = [  # (class, the field, a bad value): the message names the field
    (wire.Register, "task", None),
    (wire.Register, "task", "x" * 201),
    (wire.Register, "attempt", -1),
    (wire.Register, "attempt", (1 << 20) + 1),
    (wire.Register, "attempt", "x"),
    (wire.Register, "port", 0),
    (wire.Register, "port", 65536),
    (wire.Register, "tb_port", 1.5),
    (wire.Register, "control_port", True),
    (wire.Register, "gpus", ["0", "../x"]),
    (wire.Register, "gpus", "0"),
    (wire.Register, "container", 7),
    (wire.SpecPoll, "timeout", float("nan")),
    (wire.Started, "pid", -1),
    (wire.Heartbeat, "metrics", [1]),
    (wire.Heartbeat, "metrics", {f"m{i}": 1 for i in range(65)}),
    (wire.Heartbeat, "rss", None),  # a metric's own name: metrics={"rss": inf}
    (wire.Heartbeat, "progress_age_s", float("inf")),
    (wire.Callback, "info", None),
    (wire.Callback, "info", ["not", "an", "object"]),
    (wire.Callback, "info", {"x": "y" * 4096}),
    (wire.Tensorboard, "url", "https://host:6006"),
    (wire.Tensorboard, "url", "http://" + "h" * 300),
    (wire.Result, "exit_code", 1 << 31),
    (wire.Result, "signal", "S" * 41),
    (wire.Result, "stderr_tail", "e" * (64 * 1024 + 1)),
    (wire.Result, "error", "boom"),
    (wire.Result, "message", None),  # an error's own part: error={"message": 5}
    (wire.Result, "ended_ago_s", "soon"),
    (wire.AmMoved, "url", None),
    (wire.AmMoved, "url", "ftp://am:1"),
]


def _body_with(cls, key, value):
    body = {**IDS, "port": 2000, "info": {}, "url": "http://host:1"}
    if key == "rss":
        body["metrics"] = {"rss": float("inf")}
    elif key == "message":
        body["error"] = {"message": 5}
    elif value is None:
        body.pop(key, None)
    else:
        body[key] = value
    return body


@pytest.mark.parametrize("cls,key,value", BAD, ids=lambda v: getattr(v, "__name__", str(v)[:20]))
def test_a_bad_field_is_refused_naming_it(cls, key, value):
    with pytest.raises(BadRequest) as refused:
        cls.parse(_body_with(cls, key, value))
    assert refused.value.status == 400
    assert key in str(refused.value)


def test_durations_are_clamped_and_flags_are_only_true():
    result = wire.Result.parse({**IDS, "ended_ago_s": 1e9, "timed_out": "yes", "fenced": 1, "preempted": True})
    assert result.ended_ago_s == 3600.0 and (result.timed_out, result.fenced, result.preempted) == (False, False, True)
    assert wire.SpecPoll.parse({**IDS, "timeout": -5}).timeout == 0.0


@pytest.mark.parametrize("raw,words", [(b"[1]", "JSON object"), (b"{", "Expecting"),
                                       (b"[" * 100_000 + b"]" * 100_000, "nested too deeply")])
def test_a_body_that_is_not_a_json_object_is_a_bad_request(raw, words):
    with pytest.raises(BadRequest, match=words):
        wire.decode(raw)


def test_the_essential_fields_of_a_result_are_those_that_decide_the_job():
    essential = {f.name for f in dataclasses.fields(wire.Result) if f.metadata["essential"]}
    assert essential == {"task", "attempt", "container", "exit_code", "signal", "timed_out", "fenced", "preempted"}
    assert set(wire.Result.DETAILS) <= {f.name for f in dataclasses.fields(wire.Result)} - essential


class RefusingChannel:
    """An AM that refuses a result with details and takes one without."""

    def __init__(self):
        self.posted: list[tuple[str, dict]] = []

    def post(self, path, body):
        self.posted.append((path, body))
        if len(self.posted) == 1:
            raise RequestRefused(400, "bad request: error must be an object")
        return {"action": "exit", "reason": "done"}


def test_a_refused_result_is_sent_again_with_exactly_its_essential_fields(tmp_path):
    settings = Settings(task="worker:0", am_url="http://am:1", secret="a1" * 32, container_id=IDS["container"],
                        command="python t.py", execution_env={}, heartbeat_s=1, metrics_interval_s=5,
                        execution_timeout_s=0, registry_timeout_s=0, reserve_tb_port=False, src_zip=None,
                        runtime_dir="", log_dir=tmp_path, am_lost_timeout_s=5)
    channel = RefusingChannel()
    executor = Executor(settings, channel, {}, tmp_path)
    full = executor._call(wire.Result, 3, exit_code=1, signal=None, timed_out=False, fenced=True, preempted=True,
                          stderr_tail="boom", error={"type": "E"}, ended_ago_s=0.5, metrics={"rss": 1.0}).to_body()
    with pytest.raises(Instruction):
        executor._report(3, full)
    (path, first), (again_path, again) = channel.posted
    assert path == again_path == "/v1/result" and first == full
    assert again == {**IDS, "exit_code": 1, "fenced": True, "preempted": True}
    assert wire.Result.parse(again).exit_code == 1
