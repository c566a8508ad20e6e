"""The suite's own scheduling (tests/lanes.py, tests/conftest.py): a cluster's tests stay on one
worker (two workers would start two clusters in one directory), a module that shares a fixture
stays whole, everything else spreads. xdist's own grouping was once silently ignored (pytest 9.2
stopped taking its node-id suffixes): this fails in seconds if the lanes come apart again."""

from types import SimpleNamespace

from lanes import LANES, lane_of, lane_scheduler, work_unit


def test_each_cluster_lane_is_one_unit_of_work_and_the_rest_spreads():
    assert work_unit("tests/integration/multihost/test_faults.py::test_a") == "multihost"
    assert work_unit("tests/integration/multihost/test_across_hosts.py::test_b[x]") == "multihost"
    assert work_unit("tests/integration/secure/test_kerberos.py::test_c[no ticket]") == "secure"
    assert work_unit("tests/integration/ha/test_failover.py::test_h") == "ha"
    assert work_unit("tests/integration/compat/test_core.py::test_i[x]") == "compat"
    assert work_unit("tests/unit/test_config.py::test_d") == "tests/unit/test_config.py"
    # a module-scoped fixture (Airflow's home, the drop-in's bare venv): the module stays whole
    assert work_unit("tests/integration/test_airflow.py::test_e") == "tests/integration/test_airflow.py"
    assert work_unit("tests/integration/test_dropin.py::test_f[x]") == "tests/integration/test_dropin.py"
    # the rest: each test on whichever worker is free, with a one-host cluster of its own
    assert work_unit("tests/integration/test_policies.py::test_g") == "tests/integration/test_policies.py::test_g"
    assert [lane_of(p) for p in ("/x/tests/unit/a.py", "tests/integration/multihost/b.py",
                                 "tests/integration/secure/c.py", "tests/integration/ha/e.py",
                                 "tests/integration/compat/f.py", "tests/integration/d.py")] \
        == ["unit", "multihost", "secure", "ha", "compat", "processes"]
    assert LANES[:2] == ("multihost", "secure")  # the longest lanes are queued first


def test_loadscope_is_scheduled_by_lane_in_the_collections_order():
    option = SimpleNamespace(dist="loadscope", loadscopereorder=True, tx=["4*popen"])
    config = SimpleNamespace(getvalue=lambda name: getattr(option, name), option=option)
    scheduler = lane_scheduler(config, log=None)
    assert scheduler._split_scope("tests/integration/secure/test_kerberos.py::t") == "secure"
    assert option.loadscopereorder is False  # the lanes' order (long lanes first), not xdist's
    option.dist = "load"
    assert lane_scheduler(config, log=None) is None  # another mode the caller chose


def test_the_suite_runs_without_xdist_too():
    """`-p no:xdist` (or no xdist installed): the scheduler hook must not break the session."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    # Not the CI run's census or skip rules: this collection holds one file, not the tree
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TONY_TEST_", "PYTEST_"))}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:xdist", "-p", "no:cacheprovider", "--collect-only",
                           "-q", "tests/unit/test_lanes.py"], cwd=root, capture_output=True, text=True, timeout=120,
                          env=env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


class _Worker:
    def __init__(self, name):
        self.name, self.sent, self.shutting_down = name, [], False

    def send_runtest_some(self, indexes):
        self.sent.append(indexes)

    def shutdown(self):
        self.shutting_down = True


def test_a_module_of_alone_runs_on_the_last_worker_left_once_the_others_have_left():
    """xdist workers hold their last test until more comes or they are shut down: once only
    ALONE units are queued, a worker out of work shuts the others down as their work runs out,
    and the last one left gets the ALONE unit when the others have gone."""
    from lanes import ALONE

    option = SimpleNamespace(dist="loadscope", loadscopereorder=True, tx=["2*popen"])
    config = SimpleNamespace(getvalue=lambda name: getattr(option, name), option=option)
    scheduler = lane_scheduler(config, log=None)
    ray, a, b, c = (f"{ALONE[0]}::t", "tests/integration/test_x.py::a", "tests/integration/test_x.py::b",
                    "tests/integration/test_x.py::c")
    collection = [ray, a, b, c]
    one, two = _Worker("one"), _Worker("two")
    scheduler.registered_collections = {one: collection, two: collection}
    scheduler.assigned_work = {one: {}, two: {}}
    for nodeid in collection:  # the order the suite's sort gives: the Ray test first
        scheduler.workqueue[scheduler._split_scope(nodeid)] = {nodeid: False}
    for worker in (one, two, one):
        scheduler._assign_work_unit(worker)
    assert one.sent == [[1], [3]] and two.sent == [[2]]  # the others go first, in order
    scheduler.assigned_work[one][a][a] = True  # one runs c, two holds b
    scheduler._assign_work_unit(one)
    assert two.shutting_down and not one.shutting_down and ray in scheduler.workqueue
    scheduler.assigned_work[two][b][b] = True  # two ran its last test and left
    assert scheduler.remove_node(two) is None
    assert one.sent == [[1], [3], [0]] and not scheduler.workqueue  # after c, on the last worker
