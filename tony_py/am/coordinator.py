"""The AM's job logic: one object that owns the task table and the job state machine.

Job states (`JobState`; `_enter` is the only place the state changes, and refuses any
transition not in TRANSITIONS):

    ALLOCATING ──every task registered (GANG) / a first task's spec served (FCFS)──▶ RUNNING
        │   ▲                                                                      │
        │   └──── the prepare stage succeeded: the training stage is requested ◀───┤
        │                                                                          │
        │            retryable failure, restarts left (policy.after_failure)       │
        ├───────────────────────────────▶ RESTARTING ◀─────────────────────────────┤
        │                   (old attempt torn down; same containers where healthy, │
        │                    new ones only where gone; the new gang registers)     │
        │                                     │ the new gang complete: RUNNING     │
        ▼                                     ▼                                    ▼
    FINISHING (a verdict exists: stop every task still running) ──every container ended──▶ DONE
                                                         final status SUCCEEDED | FAILED | KILLED

Inputs arrive from three places, each under `self.lock`:
- RM/NM events relayed by the JVM (on_allocated, on_started, on_completed, …),
- executor calls through the HTTP API (register, wait_spec, heartbeat, report_result),
- the main loop's clock (tick) for heartbeats and timeouts.
Outputs go through a `ClusterPort` (request/launch/stop/release containers): the Py4J bridge
in production, a fake in unit tests. The rules (success, failure, restart budget, timeouts,
which containers a restart keeps) are pure functions in policy.py; container requests are kept
in requests.py, fail-over snapshots in failover.py, the views in report.py.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Callable, Protocol

from tony_py import frameworks
from tony_py.am import events as ev
from tony_py.am import policy, report
from tony_py.am.events import EventLog
from tony_py.am.gpus import GpuBook
from tony_py.am.failover import SNAPSHOT_VERSION, AmSnapshot, TaskRecord, Verdict, plan_adoption
from tony_py.am.policy import Action, Decision
from tony_py.am.requests import RequestBook
from tony_py.am.tasks import Container, Failure, FailureKind, Task, TaskState
from tony_py.config.spec import JobSpec, TaskType
from tony_py.errors import EXECUTOR_EXITS
from tony_py.frameworks.envplan import EnvPlan, SpecAnswer


class JobState(str, enum.Enum):
    ALLOCATING = "ALLOCATING"  # containers requested; the gang is not complete yet (first attempt)
    RUNNING = "RUNNING"  # the gang is complete: specs served, user processes run
    RESTARTING = "RESTARTING"  # a gang restart is under way: the new attempt's gang is not complete yet
    FINISHING = "FINISHING"  # a verdict exists; tasks still running are being stopped
    DONE = "DONE"  # every container ended (or the grace period passed); the AM may unregister


TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.ALLOCATING: frozenset({JobState.RUNNING, JobState.RESTARTING, JobState.FINISHING}),
    JobState.RUNNING: frozenset({JobState.ALLOCATING, JobState.RESTARTING, JobState.FINISHING}),  # ALLOCATING: next stage
    JobState.RESTARTING: frozenset({JobState.RUNNING, JobState.RESTARTING, JobState.FINISHING}),
    JobState.FINISHING: frozenset({JobState.DONE}),
    JobState.DONE: frozenset(),
}


class ClusterPort(Protocol):
    def request(self, request_id: int, task_type: TaskType, count: int) -> None: ...
    def cancel_requests(self, request_id: int) -> None: ...
    def launch(self, container_id: str, launch_spec: dict) -> None: ...
    def stop(self, container_id: str) -> None: ...
    def release(self, container_id: str) -> None: ...
    def set_progress(self, progress: float) -> None: ...
    def set_heartbeat_interval(self, ms: int) -> None: ...
    def blacklist(self, node_id: str) -> None: ...


LaunchBuilder = Callable[[Task], dict]

# How long FINISHING waits for stopped containers to report before giving up on them.
FINISH_GRACE_S = 15.0
# How long re-adopted executors may stay silent while they learn the new AM's address.
ADOPTION_GRACE_S = 20.0
# AM heartbeat to the RM: fast while containers are outstanding, relaxed afterwards.
FAST_HEARTBEAT_MS = 200
SLOW_HEARTBEAT_MS = 1000


class IllegalTransition(RuntimeError):
    pass


class Coordinator:
    def __init__(self, spec: JobSpec, port: ClusterPort, launch_builder: LaunchBuilder,
                 clock: Callable[[], float] = time.time, events: EventLog | None = None):
        self.spec = spec
        self.port = port
        self.build_launch = launch_builder
        self.clock = clock
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.tasks: dict[str, Task] = {str(t): Task(t, tracked=spec.is_tracked(t.type)) for t in spec.tasks()}
        self.book = RequestBook(spec, port, clock)
        self.events = events or EventLog(clock)
        self.state = JobState.ALLOCATING
        self.attempt = 0  # the gang attempt: 0, then 1 after the first gang restart, ...
        self.restarts_used = 0
        self.failures: list[Failure] = []
        self.decision: Decision | None = None
        self.final_status: str | None = None
        self.cluster_view: dict[str, list[str]] | None = None
        self.started_at = clock()
        self.finish_deadline: float | None = None
        self.chief_done_at: float | None = None
        self.node_failures: dict[str, int] = {}
        self.blacklisted: set[str] = set()
        self.timeline: dict[str, float] = {"am_started": self.started_at}
        self.dirty = True  # the snapshot for a later AM attempt is out of date
        self.auth_last_seen: Callable[[], dict[str, int]] = dict  # set by the AM: the verifier's memory
        self.last_tick: float | None = None
        self.stage = 0  # the stage being run (tony.application.prepare-stage / training-stage)
        self.callbacks: dict[str, dict] = {}  # what task processes reported back (Horovod's driver port)
        self.tensorboard_url: str | None = None
        self.gpus = GpuBook()
        # called (under the lock) when something changed that a waiting spec long-poll may be
        # answered by: the HTTP server wakes its waiters on its own loop
        self.watchers: list[Callable[[], None]] = []
        self._callbacks_seen = 0  # bumped by every callback: a plan built before it is stale
        self._plan: tuple[tuple, dict, EnvPlan] | None = None

    # ---- the one place the job's state changes ---------------------------------------------
    def _enter(self, state: JobState, why: str = "") -> None:
        if state not in TRANSITIONS[self.state]:
            raise IllegalTransition(f"{self.state.value} -> {state.value}")
        self.state = state
        self.dirty = True
        self.events.record(ev.STATE, why or state.value, state=state.value, attempt=self.attempt)
        self._changed()

    def _changed(self) -> None:
        """Wake whoever waits for the coordinator: blocking long-polls and the server's watchers."""
        self.cond.notify_all()
        for watcher in self.watchers:
            watcher()

    # ---- helpers -------------------------------------------------------------------------
    def _mark(self, phase: str) -> None:
        self.timeline.setdefault(f"{phase}@{self.attempt}" if self.attempt else phase, self.clock())

    def _task_for_container(self, container_id: str) -> Task | None:
        for task in self.tasks.values():
            if task.container is not None and task.container.id == container_id:
                return task
        return None

    def _live(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.container is not None]

    def _in_play(self, task: Task) -> bool:
        """Tasks of the current stage and of earlier ones (a later stage is not requested yet)."""
        return self.spec.stage_of(task.id.type) <= self.stage

    def _pending(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.state == TaskState.PENDING and self._in_play(t)]

    def _request_missing(self) -> int:
        pending: dict[str, int] = {}
        for t in self._pending():
            pending[t.id.type] = pending.get(t.id.type, 0) + 1
        asked = self.book.ask(pending)
        if asked:
            self.port.set_heartbeat_interval(FAST_HEARTBEAT_MS)
            self.events.record(ev.REQUESTED, f"requested {asked} container(s)", count=asked)
        return asked

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        with self.lock:
            if not any(e["kind"] == ev.STATE for e in self.events.recent):  # a resumed AM recorded one
                self.events.record(ev.STATE, f"{self.state.value}: requesting containers", state=self.state.value,
                                   attempt=self.attempt)
            self._request_missing()

    # ---- RM / NM events ------------------------------------------------------------------
    def on_allocated(self, data: dict) -> None:
        with self.lock:
            container = Container.from_event(data)
            type_name = self.book.granted(data.get("allocation_request_id"), data.get("priority"))
            task = None
            if self.decision is None and type_name is not None:
                task = next((t for t in self.tasks.values()
                             if t.id.type == type_name and t.state == TaskState.PENDING and t.container is None), None)
            if task is None:
                self.port.release(container.id)  # surplus, or the job is already ending
                return
            task.container = task.last_container = container
            gpus = self.spec.type(type_name).resources.gpus
            if gpus and self.spec.gpu_assignment == "auto":
                try:
                    task.gpus = self.gpus.assign(container.node_id, container.id, gpus)
                except RuntimeError as exc:  # local mode: the machine's devices are all taken
                    task.container = None
                    self.port.release(container.id)
                    self.fail_job(f"{task.name}: no free GPU: {exc}")
                    return
            task.state = TaskState.ALLOCATED
            task.launched_at = self.clock()
            self.dirty = True
            self._mark("first_container_allocated")
            self.events.record(ev.ALLOCATED, f"container {container.id} on {container.host}", task.name,
                               container_id=container.id, host=container.host)
            if not self._pending():
                self._mark("all_containers_allocated")
                self.port.set_heartbeat_interval(SLOW_HEARTBEAT_MS)
            try:
                self.port.launch(container.id, self.build_launch(task))
            except Exception as exc:  # noqa: BLE001 - any launch error fails that task
                self._fail(task, FailureKind.LAUNCH, f"could not launch container {container.id}: {exc}")

    def on_started(self, container_id: str) -> None:
        with self.lock:
            task = self._task_for_container(container_id)
            if task is None:
                return
            task.container_started = True
            if task.state == TaskState.ALLOCATED:
                task.state = TaskState.LAUNCHED
                self.events.record(ev.LAUNCHED, "container started", task.name, container_id=container_id)
            if all(t.container_started for t in self.tasks.values()):
                self._mark("all_containers_started")

    def on_start_failed(self, container_id: str, message: str) -> None:
        with self.lock:
            task = self._task_for_container(container_id)
            if task is not None and not task.state.finished:
                self._fail(task, FailureKind.LAUNCH, f"the NodeManager could not start the container: {message}")

    def on_completed(self, container_id: str, exit_status: int, diagnostics: str) -> None:
        with self.lock:
            # The devices are free once the container is gone, whoever it belonged to: a container
            # replaced by a restart is no longer any task's when its end arrives. The task keeps
            # their names (what this attempt used, for its status and history) until it is reset.
            self.gpus.release(container_id)
            task = self._task_for_container(container_id)
            if task is None:
                return
            container = task.container
            task.container = None
            task.container_started = False
            if task.state.finished:
                pass  # the executor reported the result before its container ended
            elif task.kept and self.decision is None:
                # A container kept for an in-place restart died before its executor came back
                # (typically the same lost node that caused the restart): part of that failure,
                # not a new one. Replace it without spending another restart.
                task.reset_for_attempt(task.attempt, keep_container=False)
                self._request_missing()
                self.events.record(ev.NOTE, f"its kept container {container.id} ended (exit status {exit_status}) "
                                            "before the restart reached it; requested a new one", task.name)
                if exit_status != 0:
                    self._count_node_failure(container.node_id)
            elif task.stopping or self.decision is not None:
                task.state = TaskState.STOPPED
                task.finished_at = self.clock()
            else:
                kind = policy.container_failure_kind(exit_status)
                reason = (policy.INFRASTRUCTURE_EXITS.get(exit_status) or policy.MEMORY_EXITS.get(exit_status)
                          or EXECUTOR_EXITS.get(exit_status))
                if reason is None:
                    reason = f"its executor ended without reporting a result (container exit status {exit_status})"
                detail = (diagnostics or "").strip()
                if detail:
                    reason += f"; YARN: {detail.splitlines()[0][:300]}"
                self._fail(task, kind, reason, container=container, exit_code=exit_status)
            self._changed()
            self._maybe_done()

    def on_requests_rejected(self, allocation_request_id: int, reason: str) -> None:
        """YARN's placement processor gave up on a SchedulingRequest: it can never be placed."""
        with self.lock:
            name = next((n for n, rid in self.book.ids.items() if rid == allocation_request_id), "?")
            spec = self.spec.type(name).placement_spec if name != "?" else None
            self.fail_job(f"YARN rejected the containers of {name} ({reason}): no node satisfies "
                          f"tony.{name}.placement-spec={spec}")

    def kill(self, message: str) -> None:
        """Stop the job on its owner's request (local mode's Ctrl-C: YARN's kill, without YARN)."""
        with self.lock:
            if self.decision is None:
                self._finish(Decision(Action.FAIL, message), status="KILLED")

    def fail_job(self, message: str) -> None:
        """A verdict from outside the task table (the RM refused what the job needs)."""
        with self.lock:
            if self.decision is None:
                self._finish(Decision(Action.FAIL, message), status="FAILED")

    def on_nodes_updated(self, nodes: list[dict]) -> None:
        with self.lock:
            for node in nodes:
                if node.get("state") in ("LOST", "UNHEALTHY", "DECOMMISSIONED", "SHUTDOWN"):
                    self.events.record(ev.NOTE, f"node {node.get('node_id')} is {node.get('state')}",
                                       node_id=node.get("node_id"))

    # ---- executor API --------------------------------------------------------------------
    def _lookup(self, name: str, attempt: int, container_id: str | None) -> tuple[Task | None, dict | None]:
        """The task an executor call is about, and what to answer instead if the call is stale."""
        task = self.tasks.get(name)
        if task is None:
            return None, {"action": "exit", "reason": f"unknown task {name}"}
        if attempt > task.attempt and self._current(task, container_id):
            self._catch_up(task, attempt)
        return task, self._instruction(task, attempt, container_id)

    def _current(self, task: Task, container_id: str | None) -> bool:
        return task.container is not None and not (container_id and task.container.id != container_id)

    def _instruction(self, task: Task, attempt: int, container_id: str | None) -> dict | None:
        """What a stale or superseded executor should do instead; None if it is current."""
        if not self._current(task, container_id):
            return {"action": "exit", "reason": "this container no longer runs the task"}
        if self.decision is not None or task.stopping or task.released:
            return {"action": "exit", "reason": "the job is finishing" if self.decision else "the task is over"}
        if attempt != task.attempt:
            return {"action": "restart", "attempt": task.attempt}
        return None

    def _catch_up(self, task: Task, attempt: int) -> None:
        """An executor reports an attempt this AM never ordered: the previous AM attempt restarted
        the gang and died before its snapshot said so. Move the whole gang past it; the restart
        was the old AM's, so it costs nothing again."""
        self.attempt = attempt - 1
        self.restarts_used -= 1
        self._restart(Decision(Action.RESTART, f"caught up with {task.name}, which an earlier AM attempt had "
                                               f"already restarted to attempt {attempt}"))

    def register(self, name: str, attempt: int, container_id: str, port: int, tb_port: int | None,
                 control_port: int | None = None, gpus: list[str] | None = None) -> dict:
        with self.lock:
            task, stale = self._lookup(name, attempt, container_id)
            if stale:
                return stale
            task.kept = False
            if gpus:  # the NodeManager assigned these devices itself: they are the truth
                self.gpus.record(task.container.node_id, task.container.id, gpus)
                task.gpus = list(gpus)
            task.address = f"{task.container.host}:{port}"
            task.tb_port = tb_port
            task.control_url = f"http://{task.container.host}:{control_port}" if control_port else None
            task.last_heartbeat = self.clock()
            task.state = TaskState.REGISTERED
            self.dirty = True
            self._mark("first_executor_registered")
            self.events.record(ev.REGISTERED, f"executor registered at {task.address}", task.name,
                               attempt=task.attempt)
            if self.cluster_view is None and self.spec.distributed_mode == "GANG" and self._gang_complete():
                self._serve_specs()  # enters RUNNING, which wakes the waiting long-polls
            return {"ok": True, "attempt": task.attempt}

    def _gang_complete(self) -> bool:
        """Every task of the current stage registered in this attempt (a sidecar that failed is
        left out)."""
        return all(
            t.state in (TaskState.REGISTERED, TaskState.RUNNING)
            or (t.id.type in self.spec.sidecar and t.state == TaskState.FAILED)
            for t in self.tasks.values() if self.spec.stage_of(t.id.type) == self.stage
        )

    def _serve_specs(self) -> None:
        self.cluster_view = self._view()
        self._mark("all_executors_registered")
        self._enter(JobState.RUNNING, f"attempt {self.attempt}: all {len(self.tasks)} tasks registered; spec served")

    def _view(self) -> dict[str, list[str]]:
        """Addresses of this stage's tasks and of earlier stages' tasks still running."""
        view: dict[str, list[str]] = {}
        for t in self.tasks.values():
            if t.address and (self.spec.stage_of(t.id.type) == self.stage or not t.state.finished):
                view.setdefault(t.id.type, []).append(t.address)
        return view

    def try_spec(self, name: str, attempt: int, container_id: str) -> SpecAnswer | dict | None:
        """The answer to a spec long-poll now: the task's env (a SpecAnswer), an instruction for
        a stale executor, or None while the spec does not exist yet."""
        with self.lock:
            task, stale = self._lookup(name, attempt, container_id)
            if stale:
                return stale
            task.last_heartbeat = self.clock()  # a waiting long-poll proves the executor alive
            view = self.cluster_view
            if view is None and self.spec.distributed_mode == "FCFS" and task.address:
                view = self._view()  # FCFS: each task starts with what has registered so far
                if self.state in (JobState.ALLOCATING, JobState.RESTARTING):
                    self._enter(JobState.RUNNING, f"attempt {self.attempt}: first spec served (FCFS)")
            if view is None or not task.address or not frameworks.ready(self.spec, task.id, self.callbacks):
                return None
            self._mark("first_spec_served")
            self.events.record(ev.SPEC_SERVED, "cluster spec served", task.name, attempt=task.attempt)
            plan = self._env_plan(view)
            return SpecAnswer(self._task_env(task, plan), plan)

    def polling(self, name: str, delta: int) -> None:
        """A long-poll of the task's executor started (+1) or ended (-1): alive, not heartbeating."""
        with self.lock:
            task = self.tasks.get(name)
            if task is not None:
                task.polling = max(0, task.polling + delta)

    def wait_spec(self, name: str, attempt: int, container_id: str, timeout: float) -> dict | None:
        """try_spec, blocking up to `timeout` (for callers with a thread to spare: tests)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                answer = self.try_spec(name, attempt, container_id)
                if answer is not None:
                    return answer.to_dict() if isinstance(answer, SpecAnswer) else answer
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                self.polling(name, +1)
                try:
                    self.cond.wait(remaining)
                finally:
                    self.polling(name, -1)

    def _env_plan(self, view: dict[str, list[str]]) -> EnvPlan:
        """The framework's plan for this view, built once per served view (FCFS views differ per
        task and are not kept)."""
        key = (self.attempt, self.stage, self._callbacks_seen)
        if view is self.cluster_view and self._plan is not None and self._plan[0] == key and self._plan[1] is view:
            return self._plan[2]
        plan = frameworks.plan(self.spec, view, self.callbacks)
        if view is self.cluster_view:
            self._plan = (key, view, plan)
        return plan

    def _task_env(self, task: Task, plan: EnvPlan) -> dict[str, str]:
        env = plan.env(task.id)
        env["TONY_RESTART_ATTEMPT"] = str(task.attempt)
        # TonY's counters, with TonY's meaning (TonY itself left both at 0: a bug): the session
        # a task belongs to, which user code reads to resume.
        env["SESSION_ID"] = env["ATTEMPT_NUMBER"] = str(task.attempt)
        if task.attempt:
            env["NUM_AM_RETRIES"] = str(task.attempt)
        if task.tb_port:
            env["TB_PORT"] = str(task.tb_port)
        return env

    def task_started(self, name: str, attempt: int, container_id: str, pid: int) -> dict:
        with self.lock:
            task, stale = self._lookup(name, attempt, container_id)
            if stale:
                return stale
            task.pid = pid
            task.started_at = task.last_progress = self.clock()
            task.state = TaskState.RUNNING
            self.dirty = True
            self._mark("first_task_started")
            self.events.record(ev.TASK_STARTED, "user process started", task.name, attempt=task.attempt)
            if all(t.state == TaskState.RUNNING or t.state.finished for t in self.tasks.values()):
                self._mark("all_tasks_started")
            return {"ok": True}

    def callback(self, name: str, attempt: int, container_id: str, info: dict) -> dict:
        """A task's process reported something others wait for (Horovod's driver: its port)."""
        with self.lock:
            task, stale = self._lookup(name, attempt, container_id)
            if stale:
                return stale
            self.callbacks[task.name] = {"host": task.container.host, **info}
            self._callbacks_seen += 1
            self.events.record(ev.NOTE, f"reported {info}", task.name, attempt=task.attempt)
            self._changed()
            return {"ok": True}

    def register_tensorboard(self, name: str, attempt: int, container_id: str, url: str) -> dict:
        with self.lock:
            task, stale = self._lookup(name, attempt, container_id)
            if stale:
                return stale
            self.tensorboard_url = url
            self.dirty = True
            self.events.record(ev.TB_REGISTERED, f"TensorBoard at {url}", task.name, url=url)
            return {"ok": True}

    def heartbeat(self, name: str, attempt: int, container_id: str, metrics: dict | None,
                  progress_age_s: float | None = None) -> dict:
        with self.lock:
            task, stale = self._lookup(name, attempt, container_id)
            if stale:
                return stale
            task.last_heartbeat = self.clock()
            if metrics:
                task.metrics = metrics
            if progress_age_s is not None:
                # An age, not a timestamp: the node's clock need not agree with the AM's.
                task.last_progress = max(task.last_progress or 0.0, task.last_heartbeat - float(progress_age_s))
            return {"action": "continue"}

    def report_result(self, name: str, attempt: int, container_id: str, exit_code: int | None, signal: str | None,
                      stderr_tail: str = "", error: dict | None = None, timed_out: bool = False,
                      ended_ago_s: float | None = None, metrics: dict | None = None) -> dict:
        with self.lock:
            task, stale = self._lookup(name, attempt, container_id)
            if stale:
                return stale
            task.exit_code = exit_code
            task.signal = signal
            # An age, not the node's timestamp: failures are ordered on the AM's clock.
            task.finished_at = self.clock() - max(0.0, float(ended_ago_s or 0.0))
            if metrics:
                task.metrics = metrics
            self.dirty = True
            if exit_code == 0 and not signal:
                task.state = TaskState.SUCCEEDED
                if task.id == self.spec.chief():
                    self.chief_done_at = self.clock()
                self.events.record(ev.TASK_FINISHED, "succeeded", task.name, attempt=task.attempt, exit_code=0,
                                   metrics=dict(task.metrics) or None)
                if policy.stage_done(self.spec, self.tasks, self.stage):
                    self._next_stage()
                else:
                    self._apply(policy.completion(self.spec, self.tasks))
            else:
                kind = FailureKind.SIGNAL if signal else FailureKind.EXIT_CODE
                message = policy.describe_exit(exit_code, signal)
                if timed_out:
                    kind = FailureKind.TIMEOUT
                    message = (f"killed after running longer than tony.task.executor.execution-timeout-ms="
                               f"{self.spec.execution_timeout_ms}")
                if error and error.get("message"):
                    message += f": {error.get('type') or 'error'}: {error['message']}"
                self._fail(task, kind, message, exit_code=exit_code, signal=signal,
                           stderr_tail=stderr_tail, error=error, when=task.finished_at)
            self._changed()
            answer = self._instruction(task, attempt, container_id)
            if answer is None:
                # The task's run is over and no restart involves it: its executor may leave,
                # which ends the container and gives the resources back to YARN.
                task.released = True
                answer = {"action": "exit"}
            return answer

    # ---- failures, verdicts, restarts ----------------------------------------------------
    def _fail(self, task: Task, kind: FailureKind, message: str, container: Container | None = None,
              apply: bool = True, **details) -> None:
        container = container or task.container
        failure = Failure(
            task=task.name,
            attempt=task.attempt,
            kind=kind,
            message=message,
            time=details.pop("when", None) or self.clock(),
            host=details.pop("host", None) or (container.host if container else None),
            container_id=details.pop("container_id", None) or (container.id if container else None),
            **details,
        )
        self.failures.append(failure)
        task.failure = failure
        task.state = TaskState.FAILED
        task.finished_at = failure.time
        self.dirty = True
        self.events.record(ev.TASK_FINISHED, message, task.name, attempt=task.attempt, failure_kind=kind.value,
                           exit_code=failure.exit_code, signal=failure.signal, metrics=dict(task.metrics) or None)
        if task.container is not None and kind in (FailureKind.LOST, FailureKind.TIMEOUT, FailureKind.LAUNCH):
            # The executor may be hung or cut off: it must not go on running the task. A
            # container that never started is given back instead (there is nothing to stop).
            task.released = True
            if task.container_started:
                self.port.stop(task.container.id)
            else:
                self.port.release(task.container.id)
        if container is not None and policy.counts_against_node(kind):
            self._count_node_failure(container.node_id)
        if self.decision is not None or not apply:
            return
        self._after_failure(task)

    def _after_failure(self, task: Task) -> None:
        decision = policy.after_failure(self.spec, self.tasks, task, self.restarts_used)
        if (decision.action == Action.CONTINUE and self.spec.distributed_mode == "GANG"
                and self.cluster_view is None and task.id.type not in self.spec.sidecar):
            # The gang can never be complete without it: starting the others would hang them.
            decision = Decision(Action.FAIL, f"{task.failure.headline()}, before every task had registered; "
                                "a GANG job cannot start without it", task.failure)
        self._apply(decision)

    def _count_node_failure(self, node_id: str) -> None:
        count = self.node_failures[node_id] = self.node_failures.get(node_id, 0) + 1
        if node_id not in self.blacklisted and policy.blacklist_node(self.spec, count):
            self.blacklisted.add(node_id)
            self.port.blacklist(node_id)
            self.events.record(ev.NODE_BLACKLISTED, f"blacklisted {node_id} for this job: {count} task failures "
                                                    f"there (tony.task.max-failures-per-node="
                                                    f"{self.spec.max_failures_per_node})", node_id=node_id)

    def _apply(self, decision: Decision) -> None:
        if decision.action == Action.CONTINUE or self.decision is not None:
            self._update_progress()
            return
        if decision.action == Action.RESTART:
            self._restart(decision)
        else:
            self._finish(decision, status="SUCCEEDED" if decision.action == Action.SUCCEED else "FAILED")

    def _next_stage(self) -> None:
        """Every tracked task of the prepare stage succeeded: request the training stage."""
        self.stage += 1
        self.cluster_view = None
        self._mark(f"stage_{self.stage}_requested")
        self._enter(JobState.ALLOCATING, f"stage {self.stage}: requesting "
                                         f"{', '.join(self.spec.stages[self.stage])}")
        self._request_missing()

    def _restart(self, decision: Decision) -> None:
        self.restarts_used += 1
        self.attempt += 1
        self.timeline[f"restart_decided@{self.attempt}"] = self.clock()
        self.cluster_view = None
        self.chief_done_at = None
        self.events.record(ev.RESTART_DECIDED, decision.message, attempt=self.attempt)
        self._enter(JobState.RESTARTING, f"gang restart {self.restarts_used} of {self.spec.am_retry_count}: "
                                         f"attempt {self.attempt}")
        self.callbacks.clear()
        for task in self.tasks.values():
            if self.spec.stage_of(task.id.type) < self.stage and task.state.finished:
                continue  # an earlier stage that completed is not run again
            keep = policy.keep_on_restart(task)
            if task.container is not None and not keep:
                self.port.stop(task.container.id)  # a lost/hung executor: make sure it is gone
                # Its devices go to the replacement now, not when the end of the stopped container
                # arrives (which may come after the new allocation): the stopped process is killed
                # at once, the replacement's user process starts only after its executor registered.
                self.gpus.release(task.container.id)
            task.reset_for_attempt(self.attempt, keep_container=keep)
            if keep:
                task.launched_at = self.clock()  # the registration timeout starts over
        self._request_missing()

    def _finish(self, decision: Decision, status: str) -> None:
        self.decision = decision
        self.final_status = status
        self.finish_deadline = self.clock() + FINISH_GRACE_S
        self._mark("verdict")
        self.events.record(ev.VERDICT, f"job {status}: {decision.message}", status=status)
        self._enter(JobState.FINISHING, f"job {status}")
        self.book.cancel()
        for task in self.tasks.values():
            if task.container is not None and not task.state.finished:
                task.stopping = True
                self.port.stop(task.container.id)
            elif task.state == TaskState.PENDING:
                task.state = TaskState.STOPPED
        self._update_progress()
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.state != JobState.FINISHING:
            return
        waiting = [t for t in self._live() if not t.state.finished or t.stopping]
        if not waiting or (self.finish_deadline and self.clock() >= self.finish_deadline):
            for task in waiting:
                if not task.state.finished:
                    task.state = TaskState.STOPPED
            self._mark("done")
            self._enter(JobState.DONE)

    def _update_progress(self) -> None:
        tracked = [t for t in self.tasks.values() if t.tracked]
        done = sum(1 for t in tracked if t.state.finished)
        self.port.set_progress(done / len(tracked) if tracked else 1.0)

    # ---- clock ---------------------------------------------------------------------------
    def tick(self) -> None:
        """The clock's part: heartbeats, and the timeouts that end hangs (rules in policy.py)."""
        with self.lock:
            now = self.clock()
            stall = policy.am_stall(self.spec, self.last_tick, now)
            self.last_tick = now
            if stall:
                for task in self.tasks.values():
                    if task.last_heartbeat is not None:
                        task.last_heartbeat += stall
                self.events.record(ev.NOTE, f"the AM itself stood still for {stall:.1f} s; executor silence in "
                                            "that time is not counted")
            if self.state == JobState.FINISHING:
                self._maybe_done()
                return
            if self.decision is not None:
                return
            why = policy.app_timeout(self.spec, self.started_at, now) or policy.allocation_timeout(
                self.spec, self._pending(), self.book.requested_at, now)
            if why:
                self.fail_job(why)
                return
            for task in list(self.tasks.values()):
                if self.decision is not None:
                    return
                if task.attempt != self.attempt or task.released:
                    continue
                timed_out = policy.task_timeout(self.spec, task, now)
                if timed_out:
                    if timed_out[0] == FailureKind.LOST:
                        self.events.record(ev.HEARTBEAT_LOST, timed_out[1], task.name, attempt=task.attempt,
                                           silent_s=round(now - task.last_heartbeat, 3))
                    self._fail(task, *timed_out)
            for dependency, running in ([] if self.decision else policy.dependency_timeouts(self.spec, self.tasks, now)):
                self._dependency_timed_out(dependency, running)
            stop = None if self.decision else policy.after_chief(self.spec, self.tasks, self.chief_done_at, now)
            if stop:
                lingering, decision = stop
                for task in lingering:
                    task.stopping = True
                self._finish(decision, status="SUCCEEDED")

    def _dependency_timed_out(self, dependency, running: list[Task]) -> None:
        message = policy.describe_dependency_timeout(self.spec, dependency)
        if not dependency.ignored:
            self._finish(Decision(Action.FAIL, message), status="FAILED")
            return
        for task in self.tasks.values():
            if task.id.type == dependency.type:
                task.tracked = False  # TonY's .ignored: the type no longer decides the job
        self.dirty = True
        self.events.record(ev.NOTE, f"{message}; ignored: {dependency.type} is untracked from now on")
        self._apply(policy.completion(self.spec, self.tasks))

    # ---- AM fail-over ----------------------------------------------------------------------
    def snapshot(self) -> AmSnapshot:
        """What a later AM attempt needs to take over; written to the staging dir."""
        with self.lock:
            self.dirty = False
            return AmSnapshot(
                version=SNAPSHOT_VERSION,
                state=self.state.value,
                attempt=self.attempt,
                restarts_used=self.restarts_used,
                cluster_view=self.cluster_view,
                started_at=self.started_at,
                chief_done_at=self.chief_done_at,
                tasks={name: TaskRecord(
                    state=t.state, attempt=t.attempt, container=t.container, last_container=t.last_container,
                    address=t.address, tb_port=t.tb_port, control_url=t.control_url, exit_code=t.exit_code,
                    signal=t.signal, failure=t.failure, released=t.released, tracked=t.tracked, gpus=list(t.gpus))
                    for name, t in self.tasks.items()},
                failures=list(self.failures),
                node_failures=dict(self.node_failures),
                blacklisted=sorted(self.blacklisted),
                verdict=Verdict(self.final_status, self.decision.action, self.decision.message) if self.decision else None,
                stage=self.stage,
                callbacks=dict(self.callbacks),
                tensorboard_url=self.tensorboard_url,
                auth_last_seen=self.auth_last_seen(),
            )

    def adopt(self, snap: AmSnapshot, live_containers: list[dict]) -> list[Task]:
        """Take over from an earlier AM attempt (failover.plan_adoption decides what happens to
        each task). Returns the tasks whose executors must be told where the new AM is."""
        with self.lock:
            now = self.clock()
            plan = plan_adoption(snap, {c["id"] for c in live_containers})
            self.attempt, self.restarts_used = snap.attempt, snap.restarts_used
            self.cluster_view, self.started_at = snap.cluster_view, snap.started_at
            self.chief_done_at = snap.chief_done_at
            self.stage, self.callbacks, self.tensorboard_url = snap.stage, dict(snap.callbacks), snap.tensorboard_url
            self.failures = list(snap.failures)
            self.node_failures = dict(snap.node_failures)
            for node in snap.blacklisted:
                self.blacklisted.add(node)
                self.port.blacklist(node)
            for name, record in snap.tasks.items():
                task = self.tasks.get(name)
                if task is None:
                    continue
                task.attempt = record.attempt
                task.address, task.tb_port = record.address, record.tb_port
                task.exit_code, task.signal, task.failure = record.exit_code, record.signal, record.failure
                task.released, task.tracked = record.released, record.tracked
                task.last_container = record.last_container
                if name in plan.readopt:
                    task.container, task.container_started = record.container, True
                    task.gpus = list(record.gpus)
                    if record.gpus:
                        self.gpus.record(record.container.node_id, record.container.id, record.gpus)
                    task.control_url, task.state = record.control_url, record.state
                    task.launched_at = now
                    task.last_heartbeat = now + ADOPTION_GRACE_S  # while it learns the new address
                    if record.state == TaskState.RUNNING:
                        task.started_at = task.last_progress = now
                elif name in plan.replace:  # launched but never registered: cheaper to replace
                    self.port.stop(record.container.id)
                    task.reset_for_attempt(record.attempt, keep_container=False)
                elif name in plan.finished:
                    task.state = record.state
                elif name in plan.lost:
                    task.state = TaskState.RUNNING
                else:
                    task.state = TaskState.PENDING
            for container_id in plan.strangers:  # kept by YARN but unknown to the snapshot
                self.port.stop(container_id)
            self.events.record(ev.AM_FAILOVER, f"took over from an earlier AM attempt: {len(plan.readopt)} task(s) "
                                               f"re-adopted, {len(plan.lost)} lost while no AM was running")
            if snap.verdict:
                for name in plan.lost:
                    self.tasks[name].state = TaskState.STOPPED
                self._finish(Decision(snap.verdict.action, snap.verdict.message), status=snap.verdict.status)
                return []
            if snap.state in (JobState.RUNNING.value, JobState.RESTARTING.value) and snap.state != self.state.value:
                self._enter(JobState(snap.state), f"resumed {snap.state} from the earlier AM attempt")
            # Several tasks lost at once are one event: record them all, decide once.
            lost = [self.tasks[name] for name in plan.lost if name in self.tasks]
            for task in lost:
                self._fail(task, FailureKind.LOST, "its container ended while no AM was running",
                           container=task.last_container, apply=False)
            if lost:
                self._after_failure(lost[0])
            self.dirty = True
            return [self.tasks[name] for name in plan.readopt if self.tasks[name].container is not None]

    # ---- views ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.state == JobState.DONE

    def root_cause(self) -> Failure | None:
        return report.root_cause(self.failures)

    def diagnostics(self) -> str:
        with self.lock:
            return report.diagnostics(self)

    def status(self, log_url: Callable[[Task], str | None] = lambda t: None) -> dict:
        with self.lock:
            return report.status(self, log_url)
