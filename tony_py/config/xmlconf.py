"""Hadoop-style configuration XML: read (hardened) and write.

User-supplied XML is parsed with defusedxml, which refuses DTDs, entity declarations and
external references, so an entity bomb or an XXE file is an error, not a hang or a leak.
"""

from __future__ import annotations

from pathlib import Path
from xml.etree.ElementTree import Element, SubElement, tostring

import defusedxml
import defusedxml.ElementTree as SafeET

from tony_py.errors import UsageError


def parse_xml(text: str | bytes, source: str) -> dict[str, str]:
    """Return name -> value of the <property> entries of a Hadoop configuration document."""
    try:
        root = SafeET.fromstring(text, forbid_dtd=True)
    except defusedxml.DefusedXmlException as exc:
        raise UsageError(
            f"{source}: refused hostile XML ({exc.__class__.__name__}): DTDs, entities and "
            "external references are not allowed in configuration files"
        ) from None
    except SafeET.ParseError as exc:
        raise UsageError(f"{source}: not well-formed XML: {exc}") from None
    if root.tag != "configuration":
        raise UsageError(f"{source}: the root element must be <configuration>, not <{root.tag}>")
    props: dict[str, str] = {}
    for i, prop in enumerate(root.iter("property"), start=1):
        name = prop.findtext("name", default=prop.get("name"))
        value = prop.findtext("value", default=prop.get("value"))
        if not name or not name.strip():
            raise UsageError(f"{source}: <property> #{i} has no <name>")
        props[name.strip()] = "" if value is None else value.strip()
    return props


def read_xml(path: str | Path, source: str | None = None) -> dict[str, str]:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"{source or path}: cannot read {path}: {exc.strerror}") from None
    return parse_xml(data, source or str(path))


def to_xml(props: dict[str, str]) -> str:
    root = Element("configuration")
    for name in sorted(props):
        prop = SubElement(root, "property")
        SubElement(prop, "name").text = name
        SubElement(prop, "value").text = props[name]
    body = tostring(root, encoding="unicode")
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + body.replace("<property>", "\n  <property>").replace(
        "</configuration>", "\n</configuration>"
    ) + "\n"
