"""Checked dataclasses: a `to_dict` / `from_dict` round trip that refuses what it does not know.

The job spec travels from the client to the AM and every executor as a file, and the AM's
fail-over snapshot from one AM attempt to the next. Both sides run the same version of this
code (the runtime ships with each job), so the file's keys are exactly the dataclass's fields:
an unknown or missing key, or a value of the wrong type, means the file is not ours (or is
corrupt) and is refused with the field's path, instead of being half-read. `validate()` runs in
both directions, so an invalid object can neither be written nor read.
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from functools import lru_cache


class ModelError(ValueError):
    """A spec or snapshot that does not match its schema; the message names the field."""


class Checked:
    """Mixin for (frozen or plain) dataclasses made of str/int/float/bool, enums, None,
    tuples, frozensets, dicts with str keys, and other Checked dataclasses."""

    def validate(self) -> None:  # subclasses check their invariants here
        return None

    def to_dict(self) -> dict:
        self.validate()
        return {f.name: _encode(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, data, path: str | None = None):
        path = path or cls.__name__
        if not isinstance(data, dict):
            raise ModelError(f"{path}: expected an object, got {type(data).__name__}")
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(data) - set(names))
        if unknown:
            raise ModelError(f"{path}: unknown key(s) {', '.join(unknown)}")
        missing = [n for n in names if n not in data]
        if missing:
            raise ModelError(f"{path}: missing key(s) {', '.join(missing)}")
        hints = _hints(cls)
        obj = cls(**{n: _decode(hints[n], data[n], f"{path}.{n}") for n in names})
        try:
            obj.validate()
        except ModelError:
            raise
        except ValueError as exc:
            raise ModelError(f"{path}: {exc}") from None
        return obj


@lru_cache(maxsize=None)
def _hints(cls) -> dict:
    return typing.get_type_hints(cls)


def _encode(value):
    if isinstance(value, Checked):
        return value.to_dict()
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (tuple, list)):
        return [_encode(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted(_encode(v) for v in value)
    if isinstance(value, dict):
        return {str(k): _encode(v) for k, v in value.items()}
    return value


def _decode(hint, value, path: str):
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        errors = []
        for option in options:
            try:
                return _decode(option, value, path)
            except ModelError as exc:
                errors.append(str(exc))
        raise ModelError(errors[0] if len(errors) == 1 else f"{path}: {value!r} matches none of {hint}")
    if origin is tuple:
        _expect(value, list, path)
        inner = args[0]
        return tuple(_decode(inner, v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is frozenset:
        _expect(value, list, path)
        return frozenset(_decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(value))
    if origin is dict:
        _expect(value, dict, path)
        return {_decode(args[0], k, f"{path} key"): _decode(args[1], v, f"{path}[{k!r}]") for k, v in value.items()}
    if origin is list:
        _expect(value, list, path)
        return [_decode(args[0], v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(hint, type) and issubclass(hint, Checked):
        return hint.from_dict(value, path)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except ValueError:
            raise ModelError(f"{path}: {value!r} is not one of {[m.value for m in hint]}") from None
    if hint is typing.Any:
        return value
    if hint in (dict, list):  # unparameterized: any JSON of that shape
        _expect(value, hint, path)
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ModelError(f"{path}: expected a number, got {value!r}")
        return float(value)
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ModelError(f"{path}: expected a whole number, got {value!r}")
        return value
    if hint in (str, bool):
        _expect(value, hint, path)
        return value
    raise ModelError(f"{path}: cannot decode a field of type {hint}")  # a schema bug, not bad data


def _expect(value, kind, path: str) -> None:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise ModelError(f"{path}: expected {kind.__name__}, got {value!r}")
