"""Layered TonY configuration, as TonY merges it.

    built-in defaults (tony_py/config/tony-default.xml)
  < --conf_file, or else ./tony.xml
  < $TONY_CONF_DIR/tony-site.xml
  < --conf key=value (repeatable)

For the list keys (APPEND_KEYS) a --conf value is appended instead of replacing, as in TonY.
The merged result keeps where each key came from, so errors can say which file to fix.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Iterable, Mapping

from tony_py.config.xmlconf import parse_xml, read_xml
from tony_py.errors import UsageError

DEFAULTS_PATH = Path(__file__).with_name("tony-default.xml")
APPEND_KEYS = frozenset({"tony.containers.envs", "tony.execution.envs", "tony.containers.resources"})
TONY_SITE = "tony-site.xml"
_VAR = re.compile(r"\$\{([^}$\s]+)\}")
_MAX_EXPANSION_DEPTH = 20
_MAX_VALUE_CHARS = 1 << 20


class TonyConf:
    """An ordered key -> value map that remembers each key's origin."""

    def __init__(self) -> None:
        self._values: dict[str, str] = {}
        self._origin: dict[str, str] = {}

    def set(self, key: str, value: str, origin: str, append: bool = False) -> None:
        if append and key in APPEND_KEYS and self._values.get(key):
            value = f"{self._values[key]},{value}" if value else self._values[key]
        self._values[key] = value
        self._origin[key] = origin

    def update(self, props: Mapping[str, str], origin: str, append: bool = False) -> None:
        for key, value in props.items():
            self.set(key, value, origin, append=append)

    def get(self, key: str, default: str | None = None) -> str | None:
        """The value with ${other.key} and ${env.NAME} expanded, as Hadoop does."""
        value = self._values.get(key)
        if value is None:
            return default
        return self._expand(value, depth=0)

    def _expand(self, value: str, depth: int) -> str:
        if depth > _MAX_EXPANSION_DEPTH or "${" not in value:
            return value

        def repl(m: re.Match) -> str:
            name = m.group(1)
            if name.startswith("env."):
                return os.environ.get(name[4:], m.group(0))
            if name in self._values:
                return self._expand(self._values[name], depth + 1)
            return m.group(0)

        expanded = _VAR.sub(repl, value)
        if len(expanded) > _MAX_VALUE_CHARS:
            raise UsageError(f"a configuration value grows past {_MAX_VALUE_CHARS} characters while "
                             "expanding ${...} references; check for keys that reference each other")
        return expanded

    def origin(self, key: str) -> str:
        return self._origin.get(key, "defaults")

    def keys(self) -> Iterable[str]:
        return self._values.keys()

    def resolved(self) -> dict[str, str]:
        """Every key with variables expanded: what tony-final.xml records."""
        return {k: self.get(k) or "" for k in self._values}

    def __contains__(self, key: str) -> bool:
        return key in self._values


def parse_overrides(pairs: Iterable[str], flag: str = "--conf") -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag} {pair!r}: expected key=value")
        out[key.strip()] = value.strip()
    return out


def load_conf(
    conf_file: str | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
) -> TonyConf:
    env = os.environ if env is None else env
    cwd = cwd or Path.cwd()
    conf = TonyConf()
    conf.update(parse_xml(DEFAULTS_PATH.read_bytes(), "tony-default.xml"), "defaults")
    if conf_file:
        path = Path(conf_file)
        if not path.is_file():
            raise UsageError(f"--conf_file {conf_file}: no such file")
        conf.update(read_xml(path, f"--conf_file {conf_file}"), str(path))
    elif (cwd / "tony.xml").is_file():
        conf.update(read_xml(cwd / "tony.xml"), str(cwd / "tony.xml"))
    conf_dir = env.get("TONY_CONF_DIR")
    if conf_dir and (Path(conf_dir) / TONY_SITE).is_file():
        site = Path(conf_dir) / TONY_SITE
        conf.update(read_xml(site, f"$TONY_CONF_DIR/{TONY_SITE}"), str(site))
    conf.update(parse_overrides(overrides), "--conf", append=True)
    return conf
