"""The Python the jar carries (tony_py.client.bundle) holds every package its client imports.

`hadoop jar tony-py.jar` runs `python -m tony_py.submit` (or tony_py.client.notebook) on the
gateway's own python3 with nothing installed, the jar's runtime zip on PYTHONPATH. A third-party
import anywhere the client can reach, even inside a function, must be bundled or be handled
where it is missing: CI once failed every `hadoop jar` test at submit with "No module named
'requests'" after the client's preflight began asking the ResourceManager for its release.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from tony_py.client.bundle import CLIENT_PACKAGES, JAR_ENTRY_MODULES

ROOT = Path(__file__).resolve().parents[2]

# Reachable, not bundled, and handled where they are missing (with the reason).
OPTIONAL = {
    "pyarrow": "history/store.py compacts events to Parquet only where pyarrow imports",
    "gssapi": "the kerberos extra: spnego.py imports it under try/except ImportError",
    "requests_gssapi": "the kerberos extra, as gssapi",
}


def _module_file(name: str) -> Path | None:
    path = ROOT.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _imports(module: str, source: Path) -> list[str]:
    """Every module name an import statement of `source` names (at any depth, lazy ones too)."""
    names = []
    package = module if source.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}".rstrip(".")
            names += [base] + [f"{base}.{alias.name}" for alias in node.names]
    return names


def third_party_reached(entries: tuple[str, ...]) -> dict[str, set[str]]:
    """{top-level third-party package: the tony_py modules importing it}, following tony_py's
    own imports from `entries`."""
    seen: set[str] = set()
    found: dict[str, set[str]] = {}
    todo = list(entries)
    while todo:
        module = todo.pop()
        source = _module_file(module)
        if module in seen or source is None:
            continue
        seen.add(module)
        for name in _imports(module, source):
            top = name.split(".")[0]
            if top == "tony_py":
                todo.append(name)
            elif top and top not in sys.stdlib_module_names:
                found.setdefault(top, set()).add(module)
    return found


def test_every_package_the_jars_client_can_import_is_bundled_or_optional():
    reached = third_party_reached(JAR_ENTRY_MODULES)
    missing = {top: sorted(users) for top, users in reached.items() if top not in CLIENT_PACKAGES and top not in OPTIONAL}
    assert not missing, f"imported by the jar's client but not in bundle.CLIENT_PACKAGES: {missing}"
    assert {"py4j", "requests", "rich", "defusedxml"} <= set(reached)  # the walk sees the client's imports


def test_the_walk_follows_lazy_and_relative_imports(tmp_path, monkeypatch):
    pkg = tmp_path / "tony_py"
    (pkg / "client").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "client" / "__init__.py").write_text("")
    (pkg / "client" / "entry.py").write_text("import os\nfrom . import helper\n")
    (pkg / "client" / "helper.py").write_text("def f():\n    import widgets.sub\n    from ..other import g\n")
    (pkg / "other.py").write_text("from gadget import thing\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert third_party_reached(("tony_py.client.entry",)) == {"widgets": {"tony_py.client.helper"},
                                                                "gadget": {"tony_py.other"}}
