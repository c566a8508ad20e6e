"""Which lane a test runs in, and what the scheduler keeps together (tests/conftest.py).

- `multihost`: tests/integration/multihost, on the Docker cluster; one unit of work, so one
  worker runs them all on one cluster.
- `secure`: tests/integration/secure, on the Kerberos cluster; one unit likewise.
- `ha`: tests/integration/ha, on the cluster with two ResourceManagers and a ZooKeeper; one unit
  likewise.
- `compat`: tests/integration/compat, the core of the suite again on an older Hadoop release and
  Java 11 (its own clusters); one unit likewise.
- `unit`: tests/unit; a unit per module (their module fixtures are built once).
- `processes`: the rest of tests/integration, on the one-host cluster of whichever worker runs
  them; a test is its own unit of work unless its module shares a fixture between its tests
  (a module-scoped fixture), then the module is.

ALONE holds the one-host modules that run only once every other test of the session has ended
(the scheduler keeps them back; see ALONE's comment).

EXPECTED_S are measured durations (a fresh clone's CI run, 2 cores) of the slowest one-host
tests: the scheduler starts the longest first so that none starts last and keeps the session
waiting. They are hints only: a wrong or missing figure costs balance, never correctness.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

LANES = ("multihost", "secure", "ha", "unit", "compat", "processes")  # the order work is queued in
DEFAULT_INTEGRATION_S = 8.0  # about a one-host test's median
# Ray's raylet gives its dashboard agent (a Python process) 15 s to bind and write its port file,
# a number in Ray 2.60 that no setting changes, then aborts the node ("Timed out waiting for file
# .../dashboard_agent_listen_port_<node>"). With every lane of a CI run on two cores (load 15-25),
# every worker node start of the Ray test missed it, run after run; alone it passes even beside
# twelve busy loops. The suite's own load must not decide a test, so it runs by itself, last.
ALONE = ("tests/integration/test_ray.py",)

# seconds, from the serial fresh-clone run of 2026-11-27 (before the lanes), and test_advice's and
# test_ray's from the fresh-clone run with the lanes at a2ada65; by test, any parameters
EXPECTED_S: dict[str, float] = {
    "tests/integration/test_advice.py::test_a_missized_job_gets_its_values_and_the_rerun_with_them_succeeds_with_none": 159,
    "tests/integration/test_advice.py::test_a_job_that_waited_for_a_full_queue_is_pointed_at_one_with_room": 125,
    "tests/integration/test_advice.py::test_containers_slow_to_start_their_executor_say_what_to_ship": 69,
    "tests/integration/test_ray.py::test_a_ray_driver_runs_on_the_head_and_its_tasks_on_every_worker_node": 60,
    "tests/integration/test_failures.py::test_lost_nodemanager_job_finishes_on_the_other_node": 38,
    "tests/integration/test_elastic.py::test_a_lost_node_shrinks_the_gang_to_min_instances_and_it_trains_on": 35,
    "tests/integration/test_client_and_api.py::test_interrupt_at_any_point_kills_the_app_and_leaves_nothing": 20,
    "tests/integration/test_failures.py::test_am_killed_attempt_2_finishes_the_job": 25,
    "tests/integration/test_failures.py::test_killed_worker_restarts_in_place_and_resumes_from_checkpoint": 24,
    "tests/integration/test_dropin.py::test_tonys_readme_command_line_trains_the_tensorflow_example": 22,
    "tests/integration/test_inputs.py::test_detach_returns_the_application_id_and_the_job_runs_on": 21,
    "tests/integration/test_observability.py::test_history_logs_and_portal_after_a_failed_job": 21,
    "tests/integration/test_notebook.py::test_notebook_in_a_container_through_the_relay_then_ctrl_c_kills_it": 21,
    "tests/integration/test_airflow.py::test_a_deferred_dag_run_succeeds_and_pushes_app_id_and_status": 19,
    "tests/integration/test_training_on_hdfs.py::test_each_example_trains_from_hdfs_data_and_commits_its_checkpoint_there": 17,
    "tests/integration/test_preemption.py::test_a_preempted_task_is_warned_checkpoints_and_resumes_without_spending_a_retry": 17,
    "tests/integration/test_airflow.py::test_a_failed_dag_run_logs_the_root_cause_and_is_not_retried": 17,
    "tests/integration/test_torchrun.py::test_two_tasks_of_two_torchrun_processes_train_with_ddp": 17,
    "tests/integration/test_job_shapes.py::test_a_group_dependency_timeout": 13,
    "tests/integration/test_observability.py::test_retention_purges_and_tonys_jhist_imports": 13,
    "tests/integration/test_airflow.py::test_airflow_discovers_the_provider": 13,
    "tests/integration/test_airflow.py::test_a_dag_run_killed_mid_run_leaves_no_application": 13,
    "tests/integration/test_gpus.py::test_a_task_beyond_the_devices_waits_for_a_free_one_and_gets_it": 12,
}


def lane_of(path: str) -> str:
    """A test's lane from its file path (absolute, or relative to the checkout)."""
    path = "/" + path.replace("\\", "/").lstrip("/")
    if "/tests/unit/" in path:
        return "unit"
    if "/tests/integration/multihost/" in path:
        return "multihost"
    if "/tests/integration/secure/" in path:
        return "secure"
    if "/tests/integration/ha/" in path:
        return "ha"
    if "/tests/integration/compat/" in path:
        return "compat"
    return "processes"


ROOT = Path(__file__).resolve().parents[1]
_SHARED_FIXTURE = re.compile(r"@pytest\.fixture\(scope=[\"'](module|package)[\"']")


def work_unit(nodeid: str) -> str:
    """The scheduler's unit of work a test belongs to (a worker runs a unit whole, in order)."""
    module = nodeid.split("::", 1)[0]
    lane = lane_of(module)
    if lane in ("multihost", "secure", "ha", "compat"):
        return lane
    if lane == "unit" or _shares_a_fixture(module):
        return module
    return nodeid


@functools.lru_cache(maxsize=None)
def _shares_a_fixture(module: str) -> bool:
    """Whether the module defines a module- or package-scoped fixture (built once for its tests:
    splitting them over workers would build it once per worker)."""
    try:
        return bool(_SHARED_FIXTURE.search((ROOT / module).read_text()))
    except OSError:
        return False


def lane_scheduler(config, log):
    """xdist's scheduler for `--dist loadscope`: units of work as work_unit() says, handed out in
    the collection's order (tests/conftest.py sorts it). None for another mode the caller chose.
    (xdist's own loadgroup suffixes node ids, which pytest 9.2 no longer takes: its groups were
    silently ignored and two workers each started the Docker cluster.)"""
    if config.getvalue("dist") != "loadscope":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LaneScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

        def _assign_work_unit(self, node) -> None:
            """The next unit in order, but a unit of ALONE only to the last worker left. An xdist
            worker holds its last test until it gets another or is shut down (pytest runs a
            test knowing the next), so once only ALONE units remain the others are shut down
            as their work runs out (each then runs its last test and leaves), and the last one
            left takes them (remove_node)."""
            shared = next((unit for unit in self.workqueue if not runs_alone(unit)), None)
            if shared is None:
                others = [other for other in self.assigned_work if other is not node]
                for other in others:
                    if not other.shutting_down and self._pending_of(self.assigned_work[other]) <= 1:
                        other.shutdown()
                if others:
                    return
            else:
                self.workqueue.move_to_end(shared, last=False)
            super()._assign_work_unit(node)

        def remove_node(self, node):
            crashed = super().remove_node(node)
            if len(self.assigned_work) == 1 and self.workqueue:  # the last worker left: ALONE's turn
                self._assign_work_unit(next(iter(self.assigned_work)))
            return crashed

    config.option.loadscopereorder = False  # the collection's order, not xdist's count of tests
    return LaneScheduling(config, log)


def runs_alone(unit: str) -> bool:
    return unit.split("::", 1)[0] in ALONE


def expected_seconds(item) -> float:
    if lane_of(str(item.fspath)) == "unit":
        return 0.0
    name = item.nodeid.split("@", 1)[0]
    base = name.split("[", 1)[0]
    return EXPECTED_S.get(name, EXPECTED_S.get(base, DEFAULT_INTEGRATION_S))
