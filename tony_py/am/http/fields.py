"""The values of an executor's request, checked: every number finite and in range, every text
bounded, every list and object small (tony_py/am/http/server.py refuses the request with 400 and
changes nothing otherwise)."""

from __future__ import annotations

import math

MAX_METRICS = 64


class BadRequest(ValueError):
    """A request that names the wrong things or numbers out of range: 400, nothing changed."""

    status = 400


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
    if isinstance(value, str):
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


def devices_field(body: dict) -> list[str] | None:
    devices = body.get("gpus")
    if devices is None:
        return None
    if not isinstance(devices, list) or len(devices) > 64 or not all(
            isinstance(d, str) and 0 < len(d) <= 64 and d.replace("-", "").isalnum() for d in devices):
        raise BadRequest("gpus must be a list of device indices or UUIDs")
    return devices


def metrics_field(body: dict) -> dict | None:
    metrics = body.get("metrics")
    if metrics is None:
        return None
    if not isinstance(metrics, dict) or len(metrics) > MAX_METRICS:
        raise BadRequest(f"metrics must be an object with at most {MAX_METRICS} entries")
    out = {}
    for name, value in metrics.items():
        if not isinstance(name, str) or len(name) > 64:
            raise BadRequest("metric names must be short text")
        out[name] = number_field(metrics, name, optional=False)
    return out


def error_field(body: dict) -> dict | None:
    error = body.get("error")
    if error is None:
        return None
    if not isinstance(error, dict):
        raise BadRequest("error must be an object")
    out = {}
    for key, limit in (("type", 200), ("message", 8000), ("traceback", 32000), ("task", 100)):
        if error.get(key) is not None:
            out[key] = text_field(error, key, limit=limit)
    if error.get("time") is not None:
        out["time"] = number_field(error, "time", optional=True)
    return out
