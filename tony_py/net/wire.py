"""The executor API's requests: one checked dataclass per call. The executor builds what it sends
from them and the AM parses what it receives into them (the route table in
tony_py/am/http/server.py), so the two sides cannot disagree on a name, a type or a limit.

- `parse(data)`: the request from a JSON body (or a query's values), every value checked: each
  number finite and in range, each text bounded, each list and object small. Anything else is a
  BadRequest naming the field (the AM answers 400 and changes nothing). Keys it does not know are
  ignored.
- `to_body()`: the JSON body (or the query) to send: a value that is None or False is left out
  (absent, not null: a heartbeat stays small).
- `METHOD` and `PATH`: where it goes; `essentials(body)`: what is left of a body when the AM
  cannot take the rest (the fields a class declares essential).

Standard library only, and nothing the executor does not import anyway: it builds these before
it registers.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, ClassVar
from urllib.parse import urlencode

MAX_ATTEMPT = 1 << 20
MAX_METRICS = 64
MAX_INFO = 4096  # a callback's info, as JSON
MAX_LONG_POLL_S = 30.0  # the longest a spec long-poll is held by the AM
PORT = (1, 65535)


class BadRequest(ValueError):
    """A request that names the wrong things or numbers out of range: 400, nothing changed."""

    status = 400


# ---- one value, checked (the message names the key) ------------------------------------------------
def text_field(data: dict, key: str, default: str | None | type = BadRequest, limit: int = 200) -> str | None:
    value = data.get(key)
    if value is None:
        if default is BadRequest:
            raise BadRequest(f"{key} is required")
        return default
    if not isinstance(value, str) or len(value) > limit:
        raise BadRequest(f"{key} must be text of at most {limit} characters")
    return value


def number_field(data: dict, key: str, optional: bool, default=None):
    value = data.get(key)
    if type(value) is float or type(value) is int:  # the usual case (every metric, every heartbeat)
        if math.isfinite(value):
            return value
        raise BadRequest(f"{key} must be a finite number")
    if value is None:
        if optional or default is not None:
            return default
        raise BadRequest(f"{key} is required")
    if isinstance(value, str):  # (a query's values are text)
        try:
            value = float(value)
        except ValueError:
            raise BadRequest(f"{key} must be a number, got {value[:40]!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(f"{key} must be a finite number")
    return value


def int_field(data: dict, key: str, low: int, high: int, optional: bool = False) -> int | None:
    """An identifier (port, attempt, pid, exit code): out of range is an error, not clamped."""
    value = number_field(data, key, optional)
    if value is None:
        return None
    if value != int(value) or not low <= value <= high:
        raise BadRequest(f"{key} must be a whole number in {low}..{high}")
    return int(value)


def seconds_field(data: dict, key: str, low: float, high: float, optional: bool = False,
                  default: float | None = None) -> float | None:
    """A duration: clamped to its documented range."""
    value = number_field(data, key, optional, default)
    return None if value is None else min(max(float(value), low), high)


def devices_field(data: dict, key: str = "gpus") -> list[str] | None:
    devices = data.get(key)
    if devices is None:
        return None
    if not isinstance(devices, list) or len(devices) > 64 or not all(
            isinstance(d, str) and 0 < len(d) <= 64 and d.replace("-", "").isalnum() for d in devices):
        raise BadRequest(f"{key} must be a list of device indices or UUIDs")
    return devices


def metrics_field(data: dict, key: str = "metrics") -> dict | None:
    metrics = data.get(key)
    if metrics is None:
        return None
    if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS:
        raise BadRequest(f"{key} must be an object with at most {MAX_METRICS} entries")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or len(name) > 64:
            raise BadRequest("metric names must be short text")
        out[name] = number_field(metrics, name, optional=False)
    return out


def error_field(data: dict, key: str = "error") -> dict | None:
    error = data.get(key)
    if error is None:
        return None
    if not isinstance(error, dict):
        raise BadRequest(f"{key} must be an object")
    out = {}
    for part, limit in (("type", 200), ("message", 8000), ("traceback", 32000), ("task", 100)):
        if error.get(part) is not None:
            out[part] = text_field(error, part, limit=limit)
    if error.get("time") is not None:
        out["time"] = number_field(error, "time", optional=True)
    return out


def info_field(data: dict, key: str) -> dict:
    info = data.get(key)
    if not isinstance(info, dict) or len(json.dumps(info)) > MAX_INFO:
        raise BadRequest(f"{key} must be a small JSON object")
    return info


def url_field(data: dict, key: str) -> str:
    url = text_field(data, key, limit=300)
    if not url.startswith("http://"):
        raise BadRequest(f"{key} must be an http:// URL")
    return url


def flag(data: dict, key: str) -> bool:
    return data.get(key) is True  # anything but true is false: a flag cannot be malformed


# ---- declaring a request's fields ---------------------------------------------------------------
Check = Callable[[dict, str], Any]


def checked(check: Check, default: Any = MISSING, essential: bool = False):
    """A field, the check parse() reads it with, and whether a result without its details keeps it."""
    return field(default=default, metadata={"check": check, "essential": essential})


def text(limit: int = 200, default: str | None | type = BadRequest) -> Check:
    return lambda data, key: text_field(data, key, default, limit)


def whole(low: int, high: int, optional: bool = False) -> Check:
    return lambda data, key: int_field(data, key, low, high, optional)


def seconds(low: float, high: float, optional: bool = False, default: float | None = None) -> Check:
    return lambda data, key: seconds_field(data, key, low, high, optional, default)


_CHECKS: dict[type, tuple[tuple[str, Check], ...]] = {}
# Only __init__ is generated per class (keyword-only: a request names what it says): __eq__ and
# __repr__ are the base's, once, because generating four methods for each class cost the
# executor 3 ms of its start-up (it imports this module before it registers).
_request = dataclass(kw_only=True, eq=False, repr=False)


@_request
class Request:
    """A request's values, as parsed or as to be sent; not changed once made."""

    METHOD: ClassVar[str] = "POST"
    PATH: ClassVar[str] = ""

    def __eq__(self, other) -> bool:
        return type(other) is type(self) and vars(other) == vars(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"

    @classmethod
    def parse(cls, data: dict):
        """The request from its JSON body (or query values); BadRequest naming the first bad field."""
        checks = _CHECKS.get(cls)
        if checks is None:
            checks = _CHECKS[cls] = tuple((f.name, f.metadata["check"]) for f in fields(cls))
        return cls(**{name: check(data, name) for name, check in checks})

    def to_body(self) -> dict:
        return {f.name: value for f in fields(self) if (value := getattr(self, f.name)) is not None
                and value is not False}

    @classmethod
    def essentials(cls, body: dict) -> dict:
        """What of body a receiver that refused the whole needs most (the fields declared essential)."""
        keep = {f.name for f in fields(cls) if f.metadata.get("essential")}
        return {key: value for key, value in body.items() if key in keep}


def decode(raw: bytes) -> dict:
    """A request's JSON body: an object, or BadRequest."""
    try:
        data = json.loads(raw or b"{}")
    except RecursionError:  # json's parser recurses once per level of nesting
        raise BadRequest("the body is nested too deeply") from None
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    return data


# ---- the executor's calls to the AM ----------------------------------------------------------------
@_request
class Call(Request):
    """A call about one attempt of one task, made by its executor in its container."""

    task: str = checked(text(), essential=True)
    attempt: int = checked(whole(0, MAX_ATTEMPT), essential=True)
    container: str = checked(text(default=""), default="", essential=True)


@_request
class Register(Call):
    """The attempt's ports are reserved: its address for the cluster spec."""

    PATH = "/v1/register"
    port: int = checked(whole(*PORT))
    tb_port: int | None = checked(whole(*PORT, optional=True), default=None)
    control_port: int | None = checked(whole(*PORT, optional=True), default=None)  # executor/control.py's
    gpus: list[str] | None = checked(devices_field, default=None)  # what the NodeManager assigned


@_request
class SpecPoll(Call):
    """The long-poll for the cluster spec: answered when the gang is complete, or 204 after timeout."""

    METHOD = "GET"
    PATH = "/v1/spec"
    timeout: float = checked(seconds(0.0, MAX_LONG_POLL_S, default=20.0), default=20.0)

    def target(self) -> str:
        return f"{self.PATH}?{urlencode(self.to_body())}"


@_request
class Started(Call):
    """The user process is running."""

    PATH = "/v1/started"
    pid: int | None = checked(whole(0, 1 << 31, optional=True), default=None)  # the user process's


@_request
class Heartbeat(Call):
    """Alive: renews the lease (executor/heartbeats.py), brings the AM's instruction back."""

    PATH = "/v1/heartbeat"
    metrics: dict | None = checked(metrics_field, default=None)  # a sample, once (the AM keeps the latest)
    progress_age_s: float | None = checked(seconds(0.0, 1e9, optional=True), default=None)


@_request
class Callback(Call):
    """What the task wrote to its callback file (a framework's driver address, …)."""

    PATH = "/v1/callback"
    info: dict = checked(info_field)


@_request
class Tensorboard(Call):
    """TensorBoard listens on this task's TB_PORT."""

    PATH = "/v1/tensorboard"
    url: str = checked(url_field)


@_request
class Result(Call):
    """How the attempt ended. The essential fields decide the job; the rest explain it, and a
    result the AM refuses is sent again with the essentials alone (executor/supervisor.py)."""

    PATH = "/v1/result"
    DETAILS: ClassVar[tuple[str, ...]] = ("stderr_tail", "error")  # the large parts: dropped first
    exit_code: int | None = checked(whole(-(1 << 31), (1 << 31) - 1, optional=True), default=None, essential=True)
    signal: str | None = checked(text(limit=40, default=None), default=None, essential=True)
    timed_out: bool = checked(flag, default=False, essential=True)
    fenced: bool = checked(flag, default=False, essential=True)  # killed when its lease ran out
    preempted: bool = checked(flag, default=False, essential=True)
    stderr_tail: str = checked(text(limit=64 * 1024, default=""), default="")
    error: dict | None = checked(error_field, default=None)  # the task's error file
    ended_ago_s: float | None = checked(seconds(0.0, 3600.0, optional=True), default=None)
    metrics: dict | None = checked(metrics_field, default=None)


# ---- a new AM attempt's call to an executor (executor/control.py) ----------------------------------
@_request
class AmMoved(Request):
    """Where the job's AM listens now: the executor's channel switches to it."""

    PATH = "/v1/am"
    url: str = checked(url_field)


EXECUTOR_CALLS: tuple[type[Call], ...] = (Register, SpecPoll, Started, Heartbeat, Callback, Tensorboard, Result)
