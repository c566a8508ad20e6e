"""The AM's job logic: one object that owns the job (state.py) and takes every input under one
lock.

Inputs arrive from three places:
- RM/NM events relayed by the JVM (on_allocated, on_started, on_completed, …), handled here;
- executor calls through the HTTP API (`answer` for those answered at once, `try_spec`),
  handled by the executor protocol (protocol.py);
- the main loop's clock (tick), which switches on the job's state: the watchdog (watchdog.py)
  while the job is undecided, the end of FINISHING after a verdict.
Failures become decisions and decisions become restarts or verdicts in recovery.py, by the rules
of policy.py; fail-over snapshots and adoption are adoption.py. Outputs go through a
`ClusterPort` (request/launch/stop/release containers): the Py4J bridge in production, local
processes in local mode, a fake in unit tests. Reports are made from `JobCore.view()`.
"""

from __future__ import annotations

import time
from typing import Callable, Protocol

from tony_py.am.core import adoption, policy, report
from tony_py.am.core import events as ev
from tony_py.am.core.events import EventLog
from tony_py.am.core.fencing import UNOBSERVED_EXITS
from tony_py.am.core.failover import AmSnapshot
from tony_py.am.core.policy import Action, Decision
from tony_py.am.core.protocol import ExecutorProtocol
from tony_py.am.core.recovery import SLOW_HEARTBEAT_MS, Recovery
from tony_py.am.core.requests import RequestBook
from tony_py.am.core.state import JobCore, JobState
from tony_py.am.core.tasks import Copy, Task
from tony_py.am.core.watchdog import Watchdog
from tony_py.config.spec import JobSpec, TaskType
from tony_py.errors import EXECUTOR_EXITS
from tony_py.frameworks.envplan import SpecAnswer
from tony_py.job.records import Container, FailureKind, TaskState
from tony_py.job.view import diagnostics, root_cause
from tony_py.net import wire

# How a NodeManager refuses a container allocated by an RM that has since restarted or failed over
# (ContainerManagerImpl): the allocation is void, the task is asked for again at no cost.
PREVIOUS_RM_REFUSAL = "allocated by a previous RM"


class ClusterPort(Protocol):
    def request(self, request_id: int, task_type: TaskType, count: int) -> None: ...
    def cancel_requests(self, request_id: int) -> None: ...
    def launch(self, container_id: str, launch_spec: dict) -> None: ...
    def stop(self, container_id: str) -> None: ...
    def release(self, container_id: str) -> None: ...
    def set_progress(self, progress: float) -> None: ...
    def set_heartbeat_interval(self, ms: int) -> None: ...
    def blacklist(self, node_id: str) -> None: ...
    def unblacklist(self, node_id: str) -> None: ...
    def node_count(self) -> int: ...


LaunchBuilder = Callable[[Task], dict]


class Coordinator(JobCore):
    def __init__(self, spec: JobSpec, cluster: ClusterPort, launch_builder: LaunchBuilder,
                 clock: Callable[[], float] = time.time, events: EventLog | None = None):
        super().__init__(spec, clock, events)
        self.cluster = cluster
        self.build_launch = launch_builder
        self.book = RequestBook(spec, cluster, clock)
        self.auth_last_seen: Callable[[], dict[str, int]] = dict  # set by the AM: the verifier's memory
        self.rm_lost: str | None = None  # why executors are not answered now (lose_rm)
        self._rm_lost_at: float | None = None
        self.recovery = Recovery(self, cluster, self.book)
        self.protocol = ExecutorProtocol(self, self.recovery)
        self.watchdog = Watchdog(self, self.recovery)

    def start(self) -> None:
        with self.lock:
            if not any(e["kind"] == ev.STATE for e in self.events.recent):  # a resumed AM recorded one
                self.events.record(ev.STATE, f"{self.state.value}: requesting containers", state=self.state.value,
                                   attempt=self.attempt)
            self.recovery.request_missing()

    # ---- the clock: what a tick does depends on the job's state -----------------------------
    def tick(self) -> None:
        with self.lock:
            now = self.clock()
            self.watchdog.note_stall(now)
            match self.state:
                case JobState.ALLOCATING | JobState.RUNNING | JobState.RESTARTING:
                    self.watchdog.check(now)
                    if self.watchdog.resized:
                        self.watchdog.resized = False
                        self.protocol.serve_if_complete()
                        self.changed()
                    self._lift_fences(now)
                    self.recovery.lift_avoided(now)
                    self.recovery.end_burst(now)
                case JobState.FINISHING:
                    self.recovery.end_burst(now)
                    self.recovery.maybe_done()
                case JobState.DONE:
                    pass

    def _lift_fences(self, now: float) -> None:
        """Fences whose lease ran out: a gang that waited for them may start (fencing.py)."""
        before = len(self.fences.active)
        self.fences.holding((), now)
        if len(self.fences.active) != before:
            self.protocol.serve_if_complete()
            self.changed()  # FCFS long-polls

    # ---- RM / NM events ------------------------------------------------------------------
    def on_allocated(self, data: dict) -> None:
        with self.lock:
            container = Container.from_event(data)
            type_name = self.book.granted(data.get("allocation_request_id"), data.get("priority"))
            task = None
            if self.decision is None and type_name is not None:
                task = self.next_to_grant(type_name)
            if task is None:
                self.cluster.release(container.id)  # surplus, or the job is already ending
                return
            self.give_container(task, container)
            self.recovery.end_burst()
            if not self._assign_gpus(task, container):
                return
            task.reached(Copy.GRANTED)
            task.enter(TaskState.ALLOCATED, f"container {container.id} on {container.host}")
            task.launched_at = self.clock()
            self.dirty = True
            self.mark("first_container_allocated")
            self.events.record(ev.ALLOCATED, f"container {container.id} on {container.host}", task.name,
                               container_id=container.id, host=container.host)
            if not self.book.waiting and not self.pending():  # (outstanding requests: some are pending)
                self.mark("all_containers_allocated")
                self.cluster.set_heartbeat_interval(SLOW_HEARTBEAT_MS)
            try:
                self.cluster.launch(container.id, self.build_launch(task))
            except Exception as exc:  # noqa: BLE001 - any launch error fails that task
                self.recovery.fail(task, FailureKind.LAUNCH, f"could not launch container {container.id}: {exc}")

    def _assign_gpus(self, task: Task, container: Container) -> bool:
        gpus = self.spec.type(task.id.type).resources.gpus
        if gpus and self.spec.gpu_assignment == "auto":
            try:
                task.gpus = self.gpus.assign(container.node_id, container.id, gpus)
            except RuntimeError as exc:  # local mode: the machine's devices are all taken
                task.container = None
                self.cluster.release(container.id)
                self.recovery.finish(Decision(Action.FAIL, f"{task.name}: no free GPU: {exc}"), status="FAILED")
                return False
        return True

    def on_started(self, container_id: str) -> None:
        with self.lock:
            task = self.task_for_container(container_id)
            if task is None:
                return
            task.reached(Copy.STARTED)
            if task.state == TaskState.ALLOCATED:
                task.enter(TaskState.LAUNCHED, f"its NodeManager started {container_id}")
                self.events.record(ev.LAUNCHED, "container started", task.name, container_id=container_id)
            if all(t.container_started for t in self.tasks.values()):
                self.mark("all_containers_started")

    def on_start_failed(self, container_id: str, message: str) -> None:
        with self.lock:
            task = self.task_for_container(container_id)
            if task is None or task.state.finished:
                return
            if PREVIOUS_RM_REFUSAL in message:  # the RM restarted or failed over between allocation and start
                self.recovery.replace(task, f"the NodeManager refused {container_id}, which the ResourceManager "
                                            "allocated before it restarted or failed over", count_node=False)
            else:
                self.recovery.fail(task, FailureKind.LAUNCH, f"the NodeManager could not start the container: {message}")

    def on_rm_back(self, silent_s: float) -> None:
        """The RM answered after an outage (a restart, a fail-over, a cut) that this attempt rode
        through; AMRMClient re-registered and re-sent the outstanding requests on the way."""
        with self.lock:
            self.events.record(ev.RM_RECONNECTED, f"the ResourceManager answers again after {silent_s:.1f} s without "
                                                  "an answer (a restart, a fail-over or a network cut): this AM attempt "
                                                  "and its tasks carried on")

    def on_completed(self, container_id: str, exit_status: int, diagnostics: str) -> None:
        with self.lock:
            # The devices are free once the container is gone, whoever it belonged to: a container
            # replaced by a restart is no longer any task's when its end arrives. The task keeps
            # their names (what this attempt used, for its status and history) until it is reset.
            self.gpus.release(container_id)
            if self.fences.ended(container_id, exit_status):  # a copy of a task that was fenced: it is gone
                self.protocol.serve_if_complete()
            task = self.task_for_container(container_id)
            if task is None:
                return
            container, kept = task.container, task.kept
            task.container = None
            if exit_status not in UNOBSERVED_EXITS:
                task.reached(Copy.ENDED)  # its NodeManager saw the container's processes end
            if task.state.finished:
                pass  # the executor reported the result before its container ended
            elif kept and self.decision is None:
                self.recovery.replace(task, f"its kept container {container.id} ended (exit status {exit_status}) "
                                            "before the restart reached it", count_node=exit_status != 0)
            elif task.stopping or self.decision is not None:
                task.enter(TaskState.STOPPED, f"its container ended (exit status {exit_status}) as the job ended")
                task.finished_at = self.clock()
            else:
                kind = policy.container_failure_kind(exit_status)
                if kind == FailureKind.PREEMPTED and container_id not in self.warned_containers:
                    self.preemptions += 1  # taken back without a warning (a warned one was counted then)
                self.recovery.fail(task, kind, _container_end(exit_status, diagnostics), container=container,
                                   exit_code=exit_status)
            self.changed()
            self.recovery.maybe_done()

    def on_preemption(self, container_ids: list[str], wait_ms: int) -> None:
        """YARN's PreemptionMessage: it will kill these containers (after the scheduler's
        max_wait_before_kill). Each task there is told at once, through its executor's next
        heartbeat answer, to checkpoint (SIGTERM) before the deadline. The message repeats on
        every allocate response until the containers are gone: each container is said once."""
        with self.lock:
            now = self.clock()
            for container_id in container_ids:
                task = self.task_for_container(container_id)
                if task is None or task.state.finished or container_id in self.warned_containers:
                    continue
                self.warned_containers.add(container_id)
                self.preemptions += 1
                task.preempted_at, task.preempt_deadline = now, now + wait_ms / 1000
                self.dirty = True
                self.events.record(ev.PREEMPTION, f"YARN will take container {container_id} back within "
                                                  f"{wait_ms / 1000:.0f} s (preemption for another queue): the task "
                                                  "gets SIGTERM now to checkpoint", task.name,
                                   container_id=container_id, deadline=task.preempt_deadline, attempt=task.attempt)
            self.changed()

    def on_previous_containers(self, containers: list[dict]) -> None:
        """Containers of earlier AM attempts that YARN names only after registration: those no task
        of this attempt runs in are stopped (their copies are fenced from this attempt's start:
        adoption.py)."""
        with self.lock:
            for data in containers:
                if self.task_for_container(data["id"]) is None:
                    self.cluster.stop(data["id"])
                    self.events.record(ev.NOTE, f"stopped {data['id']} on {data.get('host')}, a container of an "
                                                "earlier AM attempt that YARN reported late", container_id=data["id"])

    # ---- the ResourceManager's lease on this attempt ---------------------------------------------
    def lose_rm(self, why: str) -> None:
        """Stop answering executors, so their leases run out before the next AM attempt (which the
        RM may start once this one has been silent for its expiry) can start new copies."""
        with self.lock:
            self.rm_lost, self._rm_lost_at = why, self.clock()
            self.events.record(ev.NOTE, f"{why}: executors are not answered until it does (their leases run out)")

    def regain_rm(self) -> None:
        with self.lock:
            lost_for = self.clock() - (self._rm_lost_at or self.clock())
            self.rm_lost = self._rm_lost_at = None
            for task in self.tasks.values():  # their silence meanwhile was the AM's doing
                if task.last_heartbeat is not None:
                    task.last_heartbeat += lost_for
            self.events.record(ev.NOTE, f"the ResourceManager answers again after {lost_for:.1f} s")

    def on_requests_rejected(self, allocation_request_id: int, reason: str) -> None:
        """YARN's placement processor gave up on a SchedulingRequest: it can never be placed."""
        name = next((n for n, rid in self.book.ids.items() if rid == allocation_request_id), "?")
        spec = self.spec.type(name).placement_spec if name != "?" else None
        self.fail_job(f"YARN rejected the containers of {name} ({reason}): no node satisfies "
                      f"tony.{name}.placement-spec={spec}")

    def on_nodes_updated(self, nodes: list[dict]) -> None:
        with self.lock:
            for node in nodes:
                if node.get("state") in ("LOST", "UNHEALTHY", "DECOMMISSIONED", "SHUTDOWN"):
                    self.events.record(ev.NOTE, f"node {node.get('node_id')} is {node.get('state')}",
                                       node_id=node.get("node_id"))

    # ---- verdicts from outside the task table ------------------------------------------------
    def kill(self, message: str) -> None:
        """Stop the job on its owner's request (local mode's Ctrl-C: YARN's kill, without YARN)."""
        with self.lock:
            if self.decision is None:
                self.recovery.finish(Decision(Action.FAIL, message), status="KILLED")

    def fail_job(self, message: str) -> None:
        """A verdict from outside the task table (the RM refused what the job needs)."""
        with self.lock:
            if self.decision is None:
                self.recovery.finish(Decision(Action.FAIL, message), status="FAILED")

    # ---- executor API (protocol.py), each call under the lock ---------------------------------
    def answer(self, call: wire.Call) -> dict:
        """An executor's call answered at once (register, started, heartbeat, callback,
        tensorboard, result): ExecutorProtocol.answer."""
        with self.lock:
            return self.protocol.answer(call)

    def try_spec(self, call: wire.SpecPoll) -> SpecAnswer | dict | None:
        with self.lock:
            return self.protocol.try_spec(call)

    def polling(self, name: str, delta: int) -> None:
        with self.lock:
            self.protocol.polling(name, delta)

    def wait_spec(self, call: wire.SpecPoll) -> dict | None:
        """try_spec, blocking up to the call's timeout (for callers with a thread to spare: tests)."""
        deadline = time.monotonic() + call.timeout
        with self.cond:
            while True:
                answer = self.try_spec(call)
                if answer is not None:
                    return answer.to_dict() if isinstance(answer, SpecAnswer) else answer
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.polling(call.task, +1)
                try:
                    self.cond.wait(remaining)
                finally:
                    self.polling(call.task, -1)

    # ---- AM fail-over (adoption.py) --------------------------------------------------------------
    def snapshot(self) -> AmSnapshot:
        with self.lock:
            return adoption.snapshot(self, self.auth_last_seen)

    def adopt(self, snap: AmSnapshot, live_containers: list[dict]) -> list[Task]:
        with self.lock:
            return adoption.adopt(self, self.recovery, snap, live_containers)

    def start_over(self, previous_containers: list[dict]) -> None:
        """A later AM attempt without a usable snapshot: the earlier attempt's containers are
        stopped, its copies fenced, and the job starts from the beginning."""
        with self.lock:
            for data in previous_containers:
                self.cluster.stop(data["id"])
            adoption.fence_earlier_copies(self)

    # ---- views ---------------------------------------------------------------------------------
    def root_cause(self):
        return root_cause(self.failures)

    def diagnostics(self, details: bool = True) -> str:
        """The verdict and root cause; with details, the root cause's stderr tail and traceback."""
        return diagnostics(self.view(), details)

    def status(self, log_url: report.LogUrl = lambda t: None) -> dict:
        """status.json's content (report.py), with full detail."""
        return report.status(self.view(), log_url)


def _container_end(exit_status: int, detail: str) -> str:
    """Why a container ended whose executor never reported a result, in YARN's words too."""
    reason = (policy.INFRASTRUCTURE_EXITS.get(exit_status) or policy.MEMORY_EXITS.get(exit_status)
              or EXECUTOR_EXITS.get(exit_status))
    if reason is None:
        reason = f"its executor ended without reporting a result (container exit status {exit_status})"
    detail = (detail or "").strip()
    if detail:
        reason += f"; YARN: {detail.splitlines()[0][:300]}"
    if policy.tokens_expired(detail):
        reason += policy.TOKENS_EXPIRED_HINT
    return reason
