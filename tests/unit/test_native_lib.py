"""Hadoop's native library for the secure cluster's NodeManagers (tony_py/cluster/native.py): the
pinned file only, one this machine can load, given to the NodeManagers alone; and what `tony logs`
says when a secure cluster keeps a job's logs from its owner."""

import hashlib
from pathlib import Path

import pytest

from tony_py.client import logs_cmd
from tony_py.cluster import native, secure
from tony_py.errors import SetupError, TonyError


def test_a_file_other_than_the_pinned_one_is_refused_and_the_error_says_what_to_do(tmp_path):
    so = tmp_path / "cache" / "libhadoop.so"
    so.parent.mkdir()
    so.write_bytes(b"\x7fELF not the library")
    with pytest.raises(SetupError) as err:
        native.verify(so)
    text = str(err.value)
    assert "is not the pinned libhadoop.so" in text and native.SHA256 in text
    assert f"delete {so.parent}" in text and "tony cluster up --secure" in text


def test_the_pinned_file_must_also_load_on_this_machine(tmp_path, monkeypatch):
    so = tmp_path / "libhadoop.so"
    so.write_bytes(b"not an ELF object")
    monkeypatch.setattr(native, "SHA256", hashlib.sha256(so.read_bytes()).hexdigest())
    with pytest.raises(SetupError, match="cannot be loaded on this machine"):
        native.verify(so)


def test_only_the_nodemanagers_get_the_native_library(monkeypatch):
    monkeypatch.setattr(native, "lib_dir", lambda: Path("/cache/native"))
    krb = {"krb5_conf": "/k/krb5.conf"}
    assert secure.daemon_jvm_options(krb, "nodemanager") == ["-Djava.security.krb5.conf=/k/krb5.conf",
                                                             "-Djava.library.path=/cache/native"]
    for daemon in ("namenode", "datanode", "resourcemanager"):
        assert secure.daemon_jvm_options(krb, daemon) == ["-Djava.security.krb5.conf=/k/krb5.conf"]


class Gateway:
    """What aggregation_problem asks of a client gateway: the app's report, its aggregated-log dir."""

    def __init__(self, status, nodes):
        self.bridge = self
        self.status, self.nodes = status, nodes

    def report(self, app_id):
        return {"state": "FINISHED", "log_aggregation": self.status}

    def aggregatedLogNodes(self, app_id, owner):
        if isinstance(self.nodes, Exception):
            raise self.nodes
        return self.nodes

    def json(self, what, fn, *args):
        return fn(*args)


@pytest.mark.parametrize("status,nodes,refused", [
    ("SUCCEEDED", [], True),  # done, and no node kept a file: none could open any log
    ("SUCCEEDED", ["localhost_8041"], False),
    ("RUNNING", [], False),  # not done yet: nothing to tell
    ("DISABLED", None, False),
    ("SUCCEEDED", TonyError("list the aggregated logs: Permission denied"), False),
])
def test_an_aggregation_that_kept_no_file_is_said_to_be_refused_by_the_owner_check(status, nodes, refused):
    problem = logs_cmd.aggregation_problem(Gateway(status, nodes), "application_1_0001", "alice")
    if refused:
        assert "job's owner (alice)" in problem and "LinuxContainerExecutor" in problem and "\n" not in problem
    else:
        assert problem is None
