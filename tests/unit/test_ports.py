"""The process clusters' port claims (tony_py/cluster/ports.py): no local cluster is given a port
another live one claims, bound or not (a standby RM binds its RPC ports only when it takes over)."""

import json
import os
import time

import psutil
import pytest

from tony_py.cluster import ports
from tony_py.cluster.definition import STATE_FILE
from tony_py.errors import SetupError


@pytest.fixture(autouse=True)
def registry(tmp_path, monkeypatch):
    monkeypatch.setattr(ports, "CLAIMS", tmp_path / "claims")
    return tmp_path / "claims"


def age(registry, owner, seconds):
    """Make the owner's claim `seconds` old (past the grace of a cluster still starting)."""
    path = ports._claim_path(owner.resolve())
    claim = json.loads(path.read_text())
    path.write_text(json.dumps(dict(claim, at=time.time() - seconds)))


def test_two_clusters_never_share_a_port_though_neither_has_bound_one(tmp_path):
    first = ports.claim_ports(tmp_path / "a", 300)
    second = ports.claim_ports(tmp_path / "b", 300)
    assert len(set(first)) == 300 and len(set(second)) == 300
    assert not set(first) & set(second)
    low, _ = ports._ephemeral_range()
    assert all(ports.PORTS_FROM <= p < low for p in first + second)


def test_a_claim_lives_while_its_cluster_runs_a_daemon_and_goes_when_none_runs(tmp_path, registry):
    running, stopped = tmp_path / "running", tmp_path / "stopped"
    for owner in (running, stopped):
        owner.mkdir()
    me = psutil.Process()
    (running / STATE_FILE).write_text(json.dumps({"daemons": [{"name": "namenode", "pid": me.pid, "create_time": me.create_time(), "log": "x"}]}))
    (stopped / STATE_FILE).write_text(json.dumps({"daemons": []}))
    kept, dropped = ports.claim_ports(running, 50), ports.claim_ports(stopped, 50)
    for owner in (running, stopped):
        age(registry, owner, ports.CLAIM_GRACE_S + 1)
    ports.claim_ports(tmp_path / "new", 10)  # reads every claim
    names = {p.name for p in registry.glob("*.json")}
    assert ports._claim_path(running.resolve()).name in names
    assert ports._claim_path(stopped.resolve()).name not in names
    assert kept and dropped


def test_a_claim_of_a_cluster_still_starting_holds_without_a_record(tmp_path, registry):
    first = ports.claim_ports(tmp_path / "starting", 100)
    ports.claim_ports(tmp_path / "other", 10)
    assert ports._claim_path((tmp_path / "starting").resolve()).exists()
    assert len(first) == 100


def test_down_releases_and_a_new_up_replaces_its_own_claim(tmp_path, registry):
    owner = tmp_path / "c"
    ports.claim_ports(owner, 5)
    ports.claim_ports(owner, 7)
    claims = list(registry.glob("*.json"))
    assert len(claims) == 1 and len(json.loads(claims[0].read_text())["ports"]) == 7
    ports.release_ports(owner)
    assert not list(registry.glob("*.json"))


def test_the_registry_is_this_users_alone(registry):
    ports.release_ports(registry.parent / "x")
    assert registry.stat().st_mode & 0o777 == 0o700
    assert ports.CLAIMS_DEFAULT.name == "port-claims" and ports.CLAIMS_DEFAULT.parent.name == "tony-py"


def test_a_registry_another_user_may_write_to_is_refused(registry):
    registry.mkdir(mode=0o777)
    registry.chmod(0o777)
    with pytest.raises(SetupError, match="writable by other users"):
        ports.claim_ports(registry.parent / "c", 3)
