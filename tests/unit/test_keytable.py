"""One declaration per config key (tony_py/config/keytable.py): the built-in defaults, the
configuration page and every key the code names are held to it."""

import ast
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest

from tony_py.config import keys, keytable
from tony_py.config.build import build_job_spec
from tony_py.config.layers import TonyConf
from tony_py.config.values import read
from tony_py.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tony_py"


def conf_of(values: dict) -> TonyConf:
    conf = TonyConf()
    for key, value in values.items():
        conf.set(key, value, "--conf")
    return conf


def test_tony_default_xml_carries_the_declared_defaults():
    for prop in ElementTree.parse(PACKAGE / "config" / "tony-default.xml").getroot().iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value") or ""
        key = keytable.lookup(name)
        assert key is not None, f"{name} is in tony-default.xml but not declared in keytable.py"
        assert value == (key.xml if key.xml is not None else key.text_default()), name


def test_the_configuration_page_shows_the_declared_table():
    page = (ROOT / "docs" / "configuration.md").read_text()
    shown = page.split("<!-- keys:begin -->\n", 1)[1].split("<!-- keys:end -->", 1)[0]
    assert shown == keytable.page_table(), "regenerate it: python -m tony_py.config.keytable"


def test_the_supported_keys_are_the_declared_ones():
    declared = {k.name for k in keytable.KEYS}
    assert keys.SUPPORTED | {f"tony.<type>.{s}" for s in keys.PER_TYPE} <= declared
    for k in keytable.KEYS:
        assert k.doc and "\n" not in k.doc and "|" not in k.doc, k.name
        example = k.name.replace("<type>", "worker").replace("<G>", "g")
        assert keytable.lookup(example) is k
        assert not keys.review(conf_of({example: k.text_default() or "x"}), ["worker"]), k.name


def _named_keys():
    """(file, line, key) for every tony.* key the package's code reads or names in an error:
    the string (or f-string, its fields taken as a type's name) given to a reader."""
    readers = {"read", "get", "text_of", "int_of", "bool_of", "list_of", "choice_of", "int_set_of",
               "resource_entries", "origin", "ConfigError", "_user_resources", "local_path", "launch_value"}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name not in readers:
                continue
            for arg in node.args[:2]:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                    text = arg.value
                elif isinstance(arg, ast.JoinedStr):
                    text = "".join(v.value if isinstance(v, ast.Constant) else "worker" for v in arg.values)
                else:
                    continue
                if re.match(r"^tony\.[a-z]+\.[a-z]", text) and " " not in text:
                    yield path.relative_to(ROOT), node.lineno, text


def test_every_key_the_code_names_is_declared():
    found = list(_named_keys())
    assert len(found) > 100  # the scan sees the readers at all
    undeclared = [f"{path}:{line}: {key}" for path, line, key in found if keytable.lookup(key) is None]
    assert not undeclared, "declare these in tony_py/config/keytable.py:\n" + "\n".join(undeclared)


def test_read_types_checks_and_defaults_by_the_declaration():
    conf = conf_of({"tony.task.heartbeat-interval-ms": "50", "tony.worker.memory": "1.5g",
                     "tony.application.framework": "PyTorch", "tony.application.untracked.jobtypes": "ps, chief"})
    with pytest.raises(ConfigError, match="tony.task.heartbeat-interval-ms: must be >= 100, got 50"):
        read(conf, "tony.task.heartbeat-interval-ms")
    assert read(conf, "tony.worker.memory") == 1536 and read(conf, "tony.ps.memory") == 2048
    assert read(conf, "tony.head.memory", "8g") == 8192  # a default of the caller's: a Ray head
    assert read(conf, "tony.application.framework") == "pytorch"
    assert read(conf, "tony.application.untracked.jobtypes") == ("ps", "chief")
    assert read(conf_of({}), "tony.application.untracked.jobtypes") == ("ps",)
    assert read(conf_of({}), "tony.application.name") == "TensorFlowApplication"
    with pytest.raises(KeyError, match="tony.task.made-up is not declared"):
        read(conf, "tony.task.made-up")


def test_a_spec_built_without_the_default_file_gets_the_declared_defaults(tmp_path):
    """The default lives in the table only: the spec is the same with or without tony-default.xml."""
    from tony_py.config.layers import load_conf

    bare = build_job_spec(conf_of({"tony.worker.instances": "2", "tony.containers.command": "python x.py"}))
    layered = load_conf(None, ["tony.worker.instances=2", "tony.containers.command=python x.py"], env={}, cwd=tmp_path)
    assert build_job_spec(layered).to_dict() == bare.to_dict()
