"""Checks for user values on their way out of the client, in one place.

- Launch-script values. YARN writes every container environment value into the container's
  bash launch script as `export NAME="value"` and every localized resource as
  `ln -sf -- "path" "name"`, verbatim (ContainerLaunch.UnixShellScriptBuilder, Hadoop 3.3/3.4):
  a double quote ends the string early, `$` and backticks expand, a backslash escapes the closing
  quote, a newline starts a new command. Every value that reaches a container environment or a
  link name passes `launch_value` / `link_name` first, so bad input is exit 2 at submit time, not
  a container that dies with a shell syntax error (or runs a command) on every node.
- Text that must survive tony-final.xml: XML 1.0 cannot hold most control characters, and argv
  bytes that are not UTF-8 arrive as lone surrogates that cannot be written at all.
"""

from __future__ import annotations

import re

from tony_py.errors import ConfigError, UsageError

# bash interprets these inside double quotes; control characters (newline above all) end lines.
# A `$` is allowed only as a variable reference ($NAME, ${NAME}), which YARN documents for
# container environments (e.g. PATH=$PATH:/opt/bin); $(...), $((...)), $'...' are refused.
_LAUNCH_UNSAFE = re.compile(r'["`\\\x00-\x1f\x7f]|\$(?!\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_])')
# Characters XML 1.0 can carry (https://www.w3.org/TR/xml/#charsets), minus lone surrogates.
_XML_BAD = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _describe(ch: str) -> str:
    return {'"': "a double quote", "$": "a '$' that is not a $NAME or ${NAME} reference", "`": "a backtick", "\\": "a backslash",
            "\n": "a newline", "\r": "a carriage return", "\t": "a tab"}.get(ch, f"the character U+{ord(ch):04X}")


def launch_value(key: str, value: str, what: str = "value") -> str:
    """A value written into YARN's launch script between double quotes."""
    m = _LAUNCH_UNSAFE.search(value)
    if m:
        raise ConfigError(key, f"the {what} {value[:80]!r} contains {_describe(m.group())}, which YARN's "
                               "container launch script would interpret; remove it (or pass the value "
                               "with --shell_env, which does not go through the launch script)")
    return value


def link_name(key: str, name: str) -> str:
    """A localized resource's name: a plain file name in the container's working dir (the
    launch script links it by that name, and the NodeManager's copy keeps the file's own)."""
    m = re.search("[/$]", name) or _LAUNCH_UNSAFE.search(name)
    if m or name in ("", ".", ".."):
        what = f"contains {_describe(m.group()) if m.group() not in '/$' else repr(m.group())}" if m \
            else "is not a file name"
        raise ConfigError(key, f"the file name {name[:80]!r} {what}; YARN's container launch script needs a plain "
                               "file name: no '/', '$', quotes, backticks, backslashes or control characters")
    return name


def xml_text(key: str, value: str) -> str:
    """A value tony-final.xml can hold and give back unchanged."""
    m = _XML_BAD.search(value)
    if m:
        ch = m.group()
        if 0xD800 <= ord(ch) <= 0xDFFF:
            raise ConfigError(key, f"{value[:80]!r} is not valid UTF-8 text (it came in as undecodable bytes)")
        raise ConfigError(key, f"{value[:80]!r} contains the control character U+{ord(ch):04X}, which a "
                               "Hadoop configuration file cannot hold")
    return value


def local_path(flag: str, value: str) -> str:
    """A path on this machine that the OS can look up (an over-long name is not 'missing', it
    is an error stat() raises, which must be a clear message, not a traceback)."""
    if len(value.encode(errors="surrogateescape")) > 4095 or any(
            len(part.encode(errors="surrogateescape")) > 255 for part in value.split("/")):
        raise UsageError(f"{flag} {value[:60]!r}...: the path or one of its names is too long")
    if "\x00" in value:
        raise UsageError(f"{flag}: the path contains a NUL character")
    return value
