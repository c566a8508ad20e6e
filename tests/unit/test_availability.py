"""The ResourceManagers' availability as the launchers render it (tony_py/cluster/availability.py),
and what the client and the AM make of an RM that is away: pure parts, no daemons."""

import io
from pathlib import Path

from harness import Harness
from tony_py.bridge.gateway import BridgeError
from tony_py.client.job import Job
from tony_py.client.monitor import Monitor
from tony_py.cluster import availability
from tony_py.cluster.docker import DockerCluster, node_addresses
from tony_py.cluster.processes import LocalCluster
from tony_py.config.xmlconf import read_xml


def test_a_lone_rm_recovers_from_leveldb_and_an_ha_pair_from_zookeeper(tmp_path):
    lone = read_xml_text(availability.resourcemanager_properties("/d"))
    assert lone["yarn.resourcemanager.recovery.enabled"] == "true"
    assert lone["yarn.resourcemanager.store.class"].endswith("LeveldbRMStateStore")
    assert lone["yarn.resourcemanager.leveldb-state-store.path"] == "/d/resourcemanager/state"
    assert "yarn.resourcemanager.ha.enabled" not in lone
    rms = [{"id": "rm1", "host": "a", "rm_port": 1, "rm_scheduler_port": 2, "rm_tracker_port": 3, "rm_admin_port": 4,
            "rm_web_port": 5}, {"id": "rm2", "host": "b", "rm_port": 6, "rm_scheduler_port": 7, "rm_tracker_port": 8,
                                "rm_admin_port": 9, "rm_web_port": 10}]
    pair = read_xml_text(availability.resourcemanager_properties("/d", rms, "z:2181"))
    assert pair["yarn.resourcemanager.store.class"].endswith("ZKRMStateStore")
    assert pair["hadoop.zk.address"] == "z:2181"
    assert pair["yarn.resourcemanager.ha.rm-ids"] == "rm1,rm2"
    assert pair["yarn.resourcemanager.webapp.address.rm2"] == "b:10"
    assert pair["yarn.resourcemanager.scheduler.address.rm1"] == "a:2"


def read_xml_text(properties: str) -> dict:
    path = Path("/tmp") / f"tony-avail-{id(properties)}.xml"
    path.write_text(f"<configuration>{properties}</configuration>")
    try:
        return read_xml(path)
    finally:
        path.unlink()


def test_the_process_clusters_pair_has_one_conf_per_rm_and_a_client_conf_for_both(tmp_path):
    cluster = LocalCluster(tmp_path / "c")
    (tmp_path / "lib").mkdir()
    state = cluster._configure("3.4.3", tmp_path / "lib", ha=True)
    client = read_xml(Path(state.conf_dir) / "yarn-site.xml")
    assert client["yarn.resourcemanager.ha.enabled"] == "true" and "yarn.resourcemanager.ha.id" not in client
    for rm in ("rm1", "rm2"):
        own = read_xml(tmp_path / "c" / f"conf-{rm}" / "yarn-site.xml")
        assert own["yarn.resourcemanager.ha.id"] == rm
    assert len(set(state.rm_webs.values())) == 2 and state.resourcemanagers == ["resourcemanager1", "resourcemanager2"]
    zoo = (tmp_path / "c" / "conf-zookeeper" / "zoo.cfg").read_text()
    assert "clientPortAddress=127.0.0.1" in zoo and "admin.enableServer=false" in zoo  # no wildcard, no web server
    nm = read_xml(tmp_path / "c" / "conf-nm1" / "yarn-site.xml")
    assert nm["yarn.nodemanager.recovery.enabled"] == "true" and nm["yarn.nodemanager.recovery.supervised"] == "true"
    # a NodeManager outlasts an RM outage as production's does; the cluster's clients give up sooner
    assert int(nm["yarn.resourcemanager.connect.max-wait.ms"]) == 900_000
    assert int(client["yarn.resourcemanager.connect.max-wait.ms"]) == 120_000  # (a fail-over on a loaded machine)
    lone = LocalCluster(tmp_path / "l")._configure("3.4.3", tmp_path / "lib")
    assert lone.ha is None and lone.resourcemanagers == ["resourcemanager"]
    assert int(read_xml(Path(lone.conf_dir) / "yarn-site.xml")["yarn.resourcemanager.connect.max-wait.ms"]) == 20_000
    assert read_xml(Path(lone.conf_dir) / "yarn-site.xml")["yarn.resourcemanager.recovery.enabled"] == "true"


def test_a_fresh_start_forgets_what_a_stopped_cluster_would_have_recovered(tmp_path):
    for path in ("resourcemanager/state/x", "zookeeper/version-2/y", "nm1/recovery/z", "nm1/local/keep",
                 "namenode/keep"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    availability.forget_running_state(tmp_path)
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()) == \
        ["namenode/keep", "nm1/local/keep"]


def test_the_docker_pair_has_its_own_hosts_and_addresses(tmp_path):
    state = DockerCluster(tmp_path / "dc")._configure("3.4.3", tmp_path / "lib", "tony-py-node:test", 2, ha=True)
    names = [n.name for n in state.nodes]
    assert names[:5] == ["zookeeper", "namenode", "datanode", "resourcemanager1", "resourcemanager2"]
    assert len({n.hostname for n in state.nodes}) == len(names)
    assert len(set(node_addresses(__import__("ipaddress").ip_network("198.18.3.0/24"), names))) == len(names)
    client = read_xml(Path(state.conf_dir) / "yarn-site.xml")
    assert client["hadoop.zk.address"] == f"{state.node('zookeeper').hostname}:2181"
    assert client["yarn.resourcemanager.hostname.rm2"] == state.node("resourcemanager2").hostname
    assert list(state.rm_webs) == ["rm1", "rm2"]


# ---- the AM: a start refused for an allocation of an earlier RM ----------------------------------------
def test_a_container_of_an_rm_that_failed_over_is_asked_for_again_at_no_cost(tmp_path):
    h = Harness(tmp_path, "tony.worker.instances=2")
    c0 = h.allocate("worker")
    c1 = h.allocate("worker")
    asked = len(h.cluster.requests)
    h.c.on_start_failed(c1, "org.apache.hadoop.yarn.exceptions.InvalidContainerException: Container "
                            f"{c1} rejected as it is allocated by a previous RM")
    assert h.c.final_status is None and not h.c.failures and h.c.node_failures == {}
    assert len(h.cluster.requests) == asked + 1  # worker:1 asked for again
    h.c.on_start_failed(c0, "no such file")  # any other refusal is a launch failure, as before
    assert h.c.failures


# ---- the client: an RM that does not answer is not the job's end ---------------------------------------
class _Gateway:
    def __init__(self, answers):
        self.answers = answers
        self.calls, self.deleted = [], []
        self.bridge = self
        self.fs = self

    def json(self, what, fn, *args):
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def call(self, what, fn, *args):
        self.calls.append(what)
        if what == "delete the staging dir":
            self.deleted.append(args[0])
        elif isinstance(self.answers[0], Exception):
            raise self.answers[0]

    report = kill = delete = None


def test_the_client_follows_through_an_rm_outage_and_kills_nothing(monkeypatch):
    away = BridgeError("read the application report: ConnectException")
    running = {"state": "RUNNING", "final_status": "UNDEFINED", "attempt": 1}
    done = {"state": "FINISHED", "final_status": "SUCCEEDED", "attempt": 1}
    gw = _Gateway([running, away, away, {**running, "state": "ACCEPTED"}, running, done])
    job = Job(gw, "application_1_0001", None, "/staging/application_1_0001")
    out = io.StringIO()
    monitor = Monitor(job, out=out, poll_s=0.0, startup_timeout_ms=1)  # long over when ACCEPTED comes back
    assert monitor.follow() == 0
    text = out.getvalue()
    assert "the ResourceManager does not answer" in text and "the ResourceManager answers again after" in text
    # ACCEPTED again after it ran (a recovered application before its AM re-registers): no startup kill
    assert "killing" not in text and "kill the application" not in gw.calls
    job.cleanup()
    assert gw.deleted == ["/staging/application_1_0001"]  # it ended: its files may go


def test_a_kill_no_rm_took_leaves_the_staging_dir():
    away = BridgeError("kill the application: ConnectException")
    gw = _Gateway([away])
    job = Job(gw, "application_1_0002", None, "/staging/application_1_0002")
    try:
        job.kill("Ctrl-C")
    except BridgeError:
        pass
    else:
        raise AssertionError("a kill no RM took must say so")
    assert gw.deleted == []


def test_a_report_call_that_hangs_is_an_outage_the_view_tells_while_it_lasts(monkeypatch):
    import threading

    from tony_py.client import monitor as monitor_module

    monkeypatch.setattr(monitor_module, "RM_SLOW_S", 0.05)
    release = threading.Event()
    running = {"state": "RUNNING", "final_status": "UNDEFINED", "attempt": 1}

    class Hanging(_Gateway):
        def json(self, what, fn, *args):
            if len(self.answers) == 2:  # the second call hangs until released
                release.wait(10)
            return super().json(what, fn, *args)

    gw = Hanging([running, running, {"state": "FINISHED", "final_status": "SUCCEEDED", "attempt": 1}])
    out = io.StringIO()
    monitor = Monitor(Job(gw, "application_1_0003", None, None), out=out, poll_s=0.0)
    threading.Timer(0.5, release.set).start()
    assert monitor.follow() == 0
    assert "the ResourceManager does not answer (no answer in 0 s)" in out.getvalue()
    assert monitor._rm_note() == ""  # (the live view's "ResourceManager unreachable for N s" is gone again)
    assert "answers again" in out.getvalue()


def test_an_rm_that_does_not_know_the_application_ends_the_following_and_its_files():
    import pytest

    from tony_py.client.job import ApplicationGone

    gone = BridgeError("read the application report: ApplicationNotFoundException: Application with id "
                       "'application_1_0004' doesn't exist in RM.")
    job = Job(_Gateway([gone]), "application_1_0004", None, "/staging/application_1_0004")
    with pytest.raises(ApplicationGone, match="YARN does not know application_1_0004"):
        Monitor(job, out=io.StringIO(), poll_s=0.0).follow()
    # a kill of an application YARN does not know (a submit it refused) removes what was staged
    job = Job(_Gateway([BridgeError("kill the application: ApplicationNotFoundException: …")]), "application_1_0005",
              None, "/staging/application_1_0005")
    job.kill("Ctrl-C")
    assert job.gw.deleted == ["/staging/application_1_0005"]


def test_an_error_that_is_not_an_outage_is_not_followed_forever():
    import pytest

    denied = BridgeError("read the application report: AccessControlException: User bob cannot view application_1_6")
    job = Job(_Gateway([denied]), "application_1_0006", None, None)
    with pytest.raises(BridgeError, match="AccessControlException"):
        Monitor(job, out=io.StringIO(), poll_s=0.0).follow()
