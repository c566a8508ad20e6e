"""How a key's text becomes a value: each reader returns the typed value (or the default) and
raises a ConfigError that names the key, what was found and what is allowed."""

from __future__ import annotations

import math
import re

from tony_py.config import checks, keytable
from tony_py.config.layers import TonyConf
from tony_py.config.spec import Resources
from tony_py.errors import ConfigError

_MEMORY = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)b?$", re.IGNORECASE)
_MEMORY_UNIT_MB = {"": 1, "k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
_BOOL = {"true": True, "false": False}


def parse_memory_mb(value: str, key: str) -> int:
    """`2g`, `2048m`, `2048` (a bare number is MB), `1.5g`; rounded up to whole MB."""
    m = _MEMORY.match(value.strip()) if value is not None else None
    if not m or len(m.group(1)) > 15:
        raise ConfigError(key, f"bad memory size {value!r}: use e.g. 2g, 2048m or 2048 (MB)")
    mb = math.ceil(float(m.group(1)) * _MEMORY_UNIT_MB[m.group(2).lower()])
    if mb <= 0:
        raise ConfigError(key, f"memory must be more than 0, got {value!r}")
    return mb


def int_of(conf: TonyConf, key: str, default: int, minimum: int | None = None, maximum: int | None = None) -> int:
    raw = conf.get(key)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw.strip())
    except ValueError:
        raise ConfigError(key, f"must be a whole number, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ConfigError(key, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(key, f"must be <= {maximum}, got {value}")
    return value


def bool_of(conf: TonyConf, key: str, default: bool) -> bool:
    raw = (conf.get(key) or "").strip().lower()
    if raw == "":
        return default
    if raw not in _BOOL:
        raise ConfigError(key, f"must be true or false, got {conf.get(key)!r}")
    return _BOOL[raw]


def list_of(conf: TonyConf, key: str, default: str = "") -> tuple[str, ...]:
    raw = conf.get(key, default) or ""
    return tuple(x.strip() for x in raw.split(",") if x.strip())


def text_of(conf: TonyConf, key: str) -> str | None:
    return (conf.get(key) or "").strip() or None


def int_set_of(conf: TonyConf, key: str) -> frozenset[int]:
    out = set()
    for item in list_of(conf, key):
        try:
            out.add(int(item))
        except ValueError:
            raise ConfigError(key, f"must be a comma-separated list of exit codes, got {item!r}") from None
    return frozenset(out)


def choice_of(conf: TonyConf, key: str, allowed: tuple[str, ...], default: str) -> str:
    raw = (conf.get(key) or "").strip()
    if not raw:
        return default
    match = next((a for a in allowed if a.lower() == raw.lower()), None)
    if match is None:
        raise ConfigError(key, f"must be one of {', '.join(allowed)}, got {raw!r}")
    return match


def parse_env_list(raw: str | None, key: str, for_yarn: bool = False) -> dict[str, str]:
    """`K=V,K2=V2` (TonY's format for tony.containers.envs / tony.execution.envs). Values for
    the container (for_yarn) pass through YARN's launch script and must be safe there."""
    env: dict[str, str] = {}
    for item in (raw or "").split(","):
        item = item.strip()
        if not item:
            continue
        name, sep, value = item.partition("=")
        if not sep or not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", name.strip()):
            raise ConfigError(key, f"bad entry {item!r}: expected NAME=value")
        if for_yarn:
            checks.launch_value(key, value, what=f"value of {name.strip()}")
        env[name.strip()] = value
    return env


_UNSET = object()


def read(conf: TonyConf, name: str, default=_UNSET, maximum: int | None = None):
    """A key's value, typed and checked as keytable.py declares it (its default unless `default`
    is given: a Ray head's memory, a sidecar's vcores; `maximum` where the bound depends on the
    job: min-instances)."""
    key = keytable.lookup(name)
    if key is None:
        raise KeyError(f"{name} is not declared in tony_py/config/keytable.py")
    value = key.default if default is _UNSET else default
    if key.kind == "int":
        return int_of(conf, name, value, key.minimum, key.maximum if maximum is None else maximum)
    if key.kind == "bool":
        return bool_of(conf, name, value)
    if key.kind == "text":
        return text_of(conf, name) or value
    if key.kind == "list":
        return list_of(conf, name, ",".join(value))
    if key.kind == "choice":
        return choice_of(conf, name, key.choices, value)
    if key.kind == "memory":
        return parse_memory_mb(conf.get(name, value), name)
    if key.kind in ("env", "container-env"):
        return parse_env_list(conf.get(name), name, for_yarn=key.kind == "container-env")
    if key.kind == "exit-codes":
        return int_set_of(conf, name)
    raise TypeError(f"{name} ({key.kind}) is read by its own parser")


def resources_of(conf: TonyConf, prefix: str, memory=_UNSET, vcores=_UNSET) -> Resources:
    return Resources(memory_mb=read(conf, f"{prefix}.memory", memory), vcores=read(conf, f"{prefix}.vcores", vcores),
                     gpus=read(conf, f"{prefix}.gpus"))
