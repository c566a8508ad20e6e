"""The AM's job logic: one object that owns the task table and the job state machine.

Job states (transitions happen only here):

    ALLOCATING ──every task registered (GANG) / first task (FCFS)──▶ RUNNING
        │ ▲                                                            │
        │ └───────── retryable failure, restarts left: RESTARTING ◀────┤
        │            (same containers where healthy, fresh ports;      │
        │             new containers only for those that are gone)     │
        ▼                                                              ▼
    FINISHING (a verdict exists: stop every task still running) ──▶ DONE
                                                                       │
                                           final status SUCCEEDED | FAILED | KILLED

Inputs arrive from three places, each under `self.lock`:
- RM/NM events relayed by the JVM (on_allocated, on_started, on_completed, …),
- executor calls through the HTTP API (register, wait_spec, heartbeat, report_result, …),
- the main loop's clock (tick) for heartbeats and timeouts.
Outputs go through a `ClusterPort` (request/launch/stop/release containers), which is the Py4J
bridge in production and a fake in unit tests. Success/failure/restart rules live in policy.py.
"""

from __future__ import annotations

import enum
import threading
import time
from typing import Callable, Protocol

from tony_py import frameworks
from tony_py.am import policy
from tony_py.am.policy import Action, Decision
from tony_py.am.tasks import Container, Failure, FailureKind, Task, TaskState
from tony_py.config.spec import JobSpec, TaskType


class JobState(str, enum.Enum):
    ALLOCATING = "ALLOCATING"
    RUNNING = "RUNNING"
    RESTARTING = "RESTARTING"
    FINISHING = "FINISHING"
    DONE = "DONE"


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


class Coordinator:
    def __init__(
        self,
        spec: JobSpec,
        port: ClusterPort,
        launch_builder: LaunchBuilder,
        clock: Callable[[], float] = time.time,
    ):
        self.spec = spec
        self.port = port
        self.build_launch = launch_builder
        self.clock = clock
        self.lock = threading.RLock()
        self.cond = threading.Condition(self.lock)
        self.tasks: dict[str, Task] = {
            str(t): Task(t, tracked=spec.is_tracked(t.type)) for t in spec.tasks()
        }
        self.request_ids = {t.name: i for i, t in enumerate(spec.types)}
        self.state = JobState.ALLOCATING
        self.attempt = 0
        self.restarts_used = 0
        self.failures: list[Failure] = []
        self.decision: Decision | None = None
        self.final_status: str | None = None
        self.cluster_view: dict[str, list[str]] | None = None
        self.started_at = clock()
        self.finish_deadline: float | None = None
        self.requested_at = self.started_at  # when the outstanding container requests were made
        self.outstanding: dict[str, int] = {}  # containers asked for and not yet allocated, per type
        self.chief_done_at: float | None = None
        self.node_failures: dict[str, int] = {}
        self.blacklisted: set[str] = set()
        self.timeline: dict[str, float] = {"am_started": self.started_at}
        self.messages: list[str] = []
        self.dirty = True  # the snapshot for a later AM attempt is out of date

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

    def _note(self, text: str) -> None:
        self.messages.append(f"{time.strftime('%H:%M:%S')} {text}")

    # ---- lifecycle -----------------------------------------------------------------------
    def start(self) -> None:
        with self.lock:
            asked = self._request_missing()
            self._note(f"requested {asked} containers")

    def _request_missing(self) -> int:
        """Ask YARN for one container per PENDING task not already covered by an outstanding
        request (after a restart or an adoption, some may still be on their way)."""
        asked = 0
        for task_type in self.spec.types:
            pending = sum(1 for t in self.tasks.values() if t.id.type == task_type.name and t.state == TaskState.PENDING)
            missing = pending - self.outstanding.get(task_type.name, 0)
            if missing > 0:
                self.port.request(self.request_ids[task_type.name], task_type, missing)
                self.outstanding[task_type.name] = self.outstanding.get(task_type.name, 0) + missing
                asked += missing
        if asked:
            self.port.set_heartbeat_interval(FAST_HEARTBEAT_MS)
            self.requested_at = self.clock()
        return asked

    # ---- RM / NM events ------------------------------------------------------------------
    def on_allocated(self, data: dict) -> None:
        with self.lock:
            container = Container.from_event(data)
            type_name = self._type_for_request(data.get("allocation_request_id"), data.get("priority"))
            if type_name is not None and self.outstanding.get(type_name, 0) > 0:
                self.outstanding[type_name] -= 1
            task = None
            if self.decision is None and type_name is not None:
                task = next(
                    (t for t in self.tasks.values()
                     if t.id.type == type_name and t.state == TaskState.PENDING and t.container is None),
                    None,
                )
            if task is None:
                self.port.release(container.id)  # surplus, or the job is already ending
                return
            task.container = task.last_container = container
            task.state = TaskState.ALLOCATED
            task.launched_at = self.clock()
            self.dirty = True
            self._mark("first_container_allocated")
            if not any(t.state == TaskState.PENDING for t in self.tasks.values()):
                self._mark("all_containers_allocated")
                self.port.set_heartbeat_interval(SLOW_HEARTBEAT_MS)
            try:
                self.port.launch(container.id, self.build_launch(task))
            except Exception as exc:  # noqa: BLE001 - any launch error fails that task
                self._fail(task, FailureKind.LAUNCH, f"could not launch container {container.id}: {exc}")

    def _type_for_request(self, request_id, priority) -> str | None:
        for name, rid in self.request_ids.items():
            if rid == request_id:
                return name
        for name, rid in self.request_ids.items():  # clusters that do not echo request ids
            if rid == priority:
                return name
        return None

    def on_started(self, container_id: str) -> None:
        with self.lock:
            task = self._task_for_container(container_id)
            if task is None:
                return
            task.container_started = True
            if task.state == TaskState.ALLOCATED:
                task.state = TaskState.LAUNCHED
            if all(t.container_started for t in self.tasks.values()):
                self._mark("all_containers_started")

    def on_start_failed(self, container_id: str, message: str) -> None:
        with self.lock:
            task = self._task_for_container(container_id)
            if task is not None and not task.state.finished:
                self._fail(task, FailureKind.LAUNCH, f"the NodeManager could not start the container: {message}")

    def on_completed(self, container_id: str, exit_status: int, diagnostics: str) -> None:
        with self.lock:
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
                self._note(f"{task.name}: its kept container {container.id} ended (exit status {exit_status}) "
                           "before the restart reached it; requested a new one")
                if exit_status != 0:
                    self._count_node_failure(container.node_id)
            elif task.stopping or self.decision is not None:
                task.state = TaskState.STOPPED
                task.finished_at = self.clock()
            else:
                kind = policy.container_failure_kind(exit_status)
                reason = policy.INFRASTRUCTURE_EXITS.get(exit_status) or policy.MEMORY_EXITS.get(exit_status)
                if reason is None:
                    reason = f"its executor ended without reporting a result (container exit status {exit_status})"
                detail = (diagnostics or "").strip()
                if detail:
                    reason += f"; YARN: {detail.splitlines()[0][:300]}"
                self._fail(task, kind, reason, container=container, exit_code=exit_status)
            self.cond.notify_all()
            self._maybe_done()

    # ---- executor API --------------------------------------------------------------------
    def _lookup(self, name: str, attempt: int, container_id: str | None) -> tuple[Task | None, dict | None]:
        """The task an executor call is about, and what to answer instead if the call is stale."""
        task = self.tasks.get(name)
        if task is None:
            return None, {"action": "exit", "reason": f"unknown task {name}"}
        return task, self._instruction(task, attempt, container_id)

    def _instruction(self, task: Task, attempt: int, container_id: str | None) -> dict | None:
        """What a stale or superseded executor should do instead; None if it is current."""
        if task.container is None or (container_id and task.container.id != container_id):
            return {"action": "exit", "reason": "this container no longer runs the task"}
        if self.decision is not None or task.stopping or task.released:
            return {"action": "exit", "reason": "the job is finishing" if self.decision else "the task is over"}
        if attempt < task.attempt:
            return {"action": "restart", "attempt": task.attempt}
        if attempt > task.attempt:
            # The previous AM attempt ordered a restart it did not live to record. Move the
            # whole gang past it; this restart is the old one's, so it costs nothing again.
            self.attempt = attempt - 1
            self.restarts_used -= 1
            self._restart(Decision(Action.RESTART, f"caught up with {task.name}, which an earlier AM "
                                   f"attempt had already restarted to attempt {attempt}"))
            return {"action": "restart", "attempt": task.attempt} if attempt != task.attempt else None
        return None

    def register(self, name: str, attempt: int, container_id: str, port: int, tb_port: int | None,
                 control_port: int | None = None) -> dict:
        with self.lock:
            task, stale = self._lookup(name, attempt, container_id)
            if stale:
                return stale
            now = self.clock()
            task.kept = False
            task.address = f"{task.container.host}:{port}"
            task.tb_port = tb_port
            task.control_url = f"http://{task.container.host}:{control_port}" if control_port else None
            self.dirty = True
            task.last_heartbeat = now
            task.state = TaskState.REGISTERED
            self._mark("first_executor_registered")
            if self.cluster_view is None and self._gang_complete():
                self.cluster_view = self._view()
                self.state = JobState.RUNNING
                self._mark("all_executors_registered")
                self._note(f"attempt {self.attempt}: all {len(self.tasks)} tasks registered; spec served")
            self.cond.notify_all()
            return {"ok": True, "attempt": task.attempt}

    def _gang_complete(self) -> bool:
        """Every task registered in this attempt (a sidecar that failed is left out)."""
        return all(
            t.state in (TaskState.REGISTERED, TaskState.RUNNING)
            or (t.id.type in self.spec.sidecar and t.state == TaskState.FAILED)
            for t in self.tasks.values()
        )

    def _view(self) -> dict[str, list[str]]:
        view: dict[str, list[str]] = {}
        for t in self.tasks.values():
            if t.address:
                view.setdefault(t.id.type, []).append(t.address)
        return view

    def wait_spec(self, name: str, attempt: int, container_id: str, timeout: float) -> dict | None:
        """Long-poll: the task's cluster spec and env once it exists; None on timeout."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while True:
                task, stale = self._lookup(name, attempt, container_id)
                if stale:
                    return stale
                task.last_heartbeat = self.clock()  # a waiting long-poll proves the executor alive
                view = self.cluster_view
                if view is None and self.spec.distributed_mode == "FCFS" and task.address:
                    view = self._view()
                    self.state = JobState.RUNNING
                if view is not None and task.address:
                    self._mark("first_spec_served")
                    return {"cluster": view, "env": self._task_env(task, view)}
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                task.polling += 1
                try:
                    self.cond.wait(remaining)
                finally:
                    task.polling -= 1

    def _task_env(self, task: Task, view: dict[str, list[str]]) -> dict[str, str]:
        env = frameworks.task_env(self.spec, view, task.id)
        env["TONY_RESTART_ATTEMPT"] = str(task.attempt)
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
            if all(t.state == TaskState.RUNNING or t.state.finished for t in self.tasks.values()):
                self._mark("all_tasks_started")
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

    def report_result(
        self,
        name: str,
        attempt: int,
        container_id: str,
        exit_code: int | None,
        signal: str | None,
        stderr_tail: str = "",
        error: dict | None = None,
        timed_out: bool = False,
        ended_ago_s: float | None = None,
        metrics: dict | None = None,
    ) -> dict:
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
                self._note(f"{task.name} succeeded")
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
            self.cond.notify_all()
            return self._instruction(task, attempt, container_id) or self._after_result(task)

    def _after_result(self, task: Task) -> dict:
        # The task's run is over and no restart involves it: its executor may leave, which
        # ends the container and gives the resources back to YARN.
        task.released = True
        return {"action": "exit"}

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
        self._note(f"{failure.headline()}")
        if task.container is not None and kind in (FailureKind.LOST, FailureKind.TIMEOUT, FailureKind.LAUNCH):
            # The executor may be hung or cut off: it must not go on running the task. A
            # container that never started is given back instead (there is nothing to stop).
            task.released = True
            if task.container_started:
                self.port.stop(task.container.id)
            else:
                self.port.release(task.container.id)
        if container is not None and kind != FailureKind.EXIT_CODE:
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
        limit = self.spec.max_failures_per_node
        if limit and count >= limit and node_id not in self.blacklisted:
            self.blacklisted.add(node_id)
            self.port.blacklist(node_id)
            self._note(f"blacklisted {node_id} for this job: {count} task failures there "
                       f"(tony.task.max-failures-per-node={limit})")

    def on_nodes_updated(self, nodes: list[dict]) -> None:
        with self.lock:
            for node in nodes:
                if node.get("state") in ("LOST", "UNHEALTHY", "DECOMMISSIONED", "SHUTDOWN"):
                    self._note(f"node {node.get('node_id')} is {node.get('state')}")

    def _apply(self, decision: Decision) -> None:
        if decision.action == Action.CONTINUE or self.decision is not None:
            self._update_progress()
            return
        if decision.action == Action.RESTART:
            self._restart(decision)
        else:
            self._finish(decision, status="SUCCEEDED" if decision.action == Action.SUCCEED else "FAILED")

    def _restart(self, decision: Decision) -> None:
        self.restarts_used += 1
        self.attempt += 1
        self.timeline[f"restart_decided@{self.attempt}"] = self.clock()
        self.cluster_view = None
        self.state = JobState.RESTARTING
        self._note(decision.message)
        for task in self.tasks.values():
            # Restart in place where the executor is alive and still holds its container.
            keep = (
                task.container is not None
                and task.container_started
                and not task.released
                and not (task.failure and task.failure.kind in (FailureKind.LOST, FailureKind.INFRASTRUCTURE,
                                                                 FailureKind.LAUNCH, FailureKind.TIMEOUT))
            )
            if task.container is not None and not keep:
                self.port.stop(task.container.id)  # a lost/hung executor: make sure it is gone
            task.reset_for_attempt(self.attempt, keep_container=keep)
            if keep:
                task.launched_at = self.clock()  # the registration timeout starts over
        self._request_missing()
        self.chief_done_at = None
        self.state = JobState.ALLOCATING
        self.dirty = True
        self.cond.notify_all()

    def _finish(self, decision: Decision, status: str) -> None:
        self.decision = decision
        self.final_status = status
        self.dirty = True
        self.state = JobState.FINISHING
        self.finish_deadline = self.clock() + FINISH_GRACE_S
        self._mark("verdict")
        self._note(f"job {status}: {decision.message}")
        for task_type in self.spec.types:
            self.port.cancel_requests(self.request_ids[task_type.name])
        self.outstanding.clear()
        for task in self.tasks.values():
            if task.container is not None and not task.state.finished:
                task.stopping = True
                self.port.stop(task.container.id)
            elif task.state == TaskState.PENDING:
                task.state = TaskState.STOPPED
        self._update_progress()
        self.cond.notify_all()
        self._maybe_done()

    def _maybe_done(self) -> None:
        if self.state != JobState.FINISHING:
            return
        waiting = [t for t in self._live() if not t.state.finished or t.stopping]
        if not waiting or (self.finish_deadline and self.clock() >= self.finish_deadline):
            for task in waiting:
                if not task.state.finished:
                    task.state = TaskState.STOPPED
            self.state = JobState.DONE
            self._mark("done")
            self.cond.notify_all()

    def _update_progress(self) -> None:
        tracked = [t for t in self.tasks.values() if t.tracked]
        done = sum(1 for t in tracked if t.state.finished)
        self.port.set_progress(done / len(tracked) if tracked else 1.0)

    # ---- clock ---------------------------------------------------------------------------
    def tick(self) -> None:
        """The clock's part: heartbeats, and the timeouts that end hangs."""
        with self.lock:
            now = self.clock()
            if self.state == JobState.FINISHING:
                self._maybe_done()
                return
            if self.decision is not None:
                return
            for check in (self._check_app_timeout, self._check_allocation_timeout, self._check_tasks,
                          self._check_after_chief):
                check(now)
                if self.decision is not None:
                    return

    def _fail_job(self, message: str) -> None:
        self._finish(Decision(Action.FAIL, message), status="FAILED")

    def _check_app_timeout(self, now: float) -> None:
        if self.spec.timeout_ms > 0 and now - self.started_at > self.spec.timeout_ms / 1000:
            self._fail_job(f"the application timed out after {self.spec.timeout_ms / 1000:.0f} s "
                           "(tony.application.timeout)")

    def _check_allocation_timeout(self, now: float) -> None:
        limit = self.spec.allocation_timeout_ms
        pending = [t for t in self.tasks.values() if t.state == TaskState.PENDING]
        if limit < 0 or not pending or now - self.requested_at <= limit / 1000:
            return
        wanted = []
        for task_type in self.spec.types:
            missing = sum(1 for t in pending if t.id.type == task_type.name)
            if missing:
                wanted.append(f"{missing} of {task_type.instances} {task_type.name} "
                              f"({task_type.resources.describe()} each)")
        self._fail_job(
            f"{self.spec.distributed_mode} allocation timed out after {limit / 1000:.0f} s "
            f"(tony.container.allocation.timeout): YARN did not grant {', '.join(wanted)}; the "
            "cluster (or the queue) has no room for them"
        )

    def _check_tasks(self, now: float) -> None:
        spec = self.spec
        expiry = spec.heartbeat_interval_ms * spec.max_missed_heartbeats / 1000
        for task in list(self.tasks.values()):
            if self.decision is not None:
                return
            if task.attempt != self.attempt or task.released:
                continue
            if (task.state in (TaskState.ALLOCATED, TaskState.LAUNCHED) and task.launched_at
                    and spec.registration_timeout_ms >= 0
                    and now - task.launched_at > spec.registration_timeout_ms / 1000):
                self._fail(task, FailureKind.LAUNCH,
                           f"its executor did not register within {spec.registration_timeout_ms / 1000:.0f} s "
                           "(tony.container.registration.timeout)")
            elif task.state in (TaskState.REGISTERED, TaskState.RUNNING) and task.last_heartbeat \
                    and not task.polling and now - task.last_heartbeat > expiry:
                self._fail(task, FailureKind.LOST,
                           f"its executor sent no heartbeat for {now - task.last_heartbeat:.1f} s "
                           f"(tony.task.heartbeat-interval-ms x tony.task.max-missed-heartbeats = {expiry:.1f} s)")
            elif task.state == TaskState.RUNNING and spec.progress_timeout_ms > 0:
                last = task.last_progress or task.started_at or now
                if now - last > spec.progress_timeout_ms / 1000:
                    self._fail(task, FailureKind.TIMEOUT,
                               f"made no progress for {now - last:.1f} s (tony.task.progress-timeout-ms="
                               f"{spec.progress_timeout_ms}); the process was killed")

    def _check_after_chief(self, now: float) -> None:
        limit = self.spec.after_chief_timeout_ms
        if self.chief_done_at is None or limit < 0 or now - self.chief_done_at <= limit / 1000:
            return
        lingering = [t for t in self.tasks.values() if t.tracked and not t.state.finished]
        if not lingering:
            return
        names = ", ".join(t.name for t in lingering)
        for task in lingering:
            task.stopping = True
        self._finish(
            Decision(Action.SUCCEED,
                     f"the chief succeeded; stopped {names}, still running {limit / 1000:.0f} s after it "
                     "(tony.application.after-chief-timeout-ms)"),
            status="SUCCEEDED",
        )

    # ---- AM fail-over ----------------------------------------------------------------------
    def snapshot(self) -> dict:
        """What a later AM attempt needs to take over; written to the staging dir."""
        with self.lock:
            self.dirty = False
            return {
                "version": 1,
                "attempt": self.attempt,
                "restarts_used": self.restarts_used,
                "cluster_view": self.cluster_view,
                "started_at": self.started_at,
                "chief_done_at": self.chief_done_at,
                "tasks": {name: t.to_json() for name, t in self.tasks.items()},
                "failures": [f.to_json() for f in self.failures],
                "node_failures": dict(self.node_failures),
                "blacklisted": sorted(self.blacklisted),
                "verdict": {"status": self.final_status, "action": self.decision.action.value,
                            "message": self.decision.message} if self.decision else None,
            }

    def adopt(self, snap: dict, live_containers: list[dict]) -> list[Task]:
        """Take over from an earlier AM attempt. Tasks whose containers YARN kept and whose
        executors had registered are re-adopted untouched (they keep running; they only need
        the new AM's address); an executor that had not registered yet is replaced; a task
        whose container ended while no AM was there is a failure (the policy decides).
        Returns the tasks whose executors must be told where the new AM is."""
        with self.lock:
            now = self.clock()
            live = {c["id"]: c for c in live_containers}
            self.attempt = snap["attempt"]
            self.restarts_used = snap["restarts_used"]
            self.cluster_view = snap.get("cluster_view")
            self.started_at = snap.get("started_at") or self.started_at
            self.chief_done_at = snap.get("chief_done_at")
            self.failures = [Failure.from_json(f) for f in snap.get("failures", [])]
            self.node_failures = dict(snap.get("node_failures", {}))
            for node in snap.get("blacklisted", []):
                self.blacklisted.add(node)
                self.port.blacklist(node)
            reach, lost = [], []
            for name, data in snap["tasks"].items():
                task = self.tasks.get(name)
                if task is None:
                    continue
                task.attempt = data["attempt"]
                task.address, task.tb_port = data.get("address"), data.get("tb_port")
                task.exit_code, task.signal = data.get("exit_code"), data.get("signal")
                task.released = data.get("released", False)
                task.failure = Failure.from_json(data["failure"]) if data.get("failure") else None
                if data.get("last_container"):
                    task.last_container = Container(**data["last_container"])
                state = TaskState(data["state"])
                container = data.get("container")
                if container and container["id"] in live and data.get("control_url"):
                    live.pop(container["id"])
                    task.container = Container(**container)
                    task.container_started = True
                    task.control_url = data["control_url"]
                    task.state = state
                    task.launched_at = task.last_heartbeat = now
                    if state == TaskState.RUNNING:
                        task.started_at = task.last_progress = now
                    reach.append(task)
                elif container and container["id"] in live:
                    # launched but never registered: cheaper to replace than to wait for it
                    self.port.stop(container["id"])
                    live.pop(container["id"])
                    task.reset_for_attempt(task.attempt, keep_container=False)
                elif state.finished:
                    task.state = state
                elif container:
                    task.state = TaskState.RUNNING
                    lost.append(task)
                else:
                    task.state = TaskState.PENDING
            for container_id in live:  # kept by YARN but unknown to the snapshot
                self.port.stop(container_id)
            self._note(f"took over from an earlier AM attempt: {len(reach)} task(s) re-adopted, "
                       f"{len(lost)} lost while no AM was running")
            verdict = snap.get("verdict")
            if verdict:
                for task in lost:
                    task.state = TaskState.STOPPED
                self._finish(Decision(Action(verdict["action"]), verdict["message"]), status=verdict["status"])
                return []
            self.state = JobState.RUNNING if self.cluster_view else JobState.ALLOCATING
            # Executors learn the new address and retry with backoff: give them time before
            # their silence counts.
            for task in reach:
                task.last_heartbeat = now + ADOPTION_GRACE_S
            # Several tasks lost at once are one event: record them all, decide once.
            for task in lost:
                self._fail(task, FailureKind.LOST, "its container ended while no AM was running",
                           container=task.last_container, apply=False)
            if lost:
                self._after_failure(lost[0])
            self.dirty = True
            return [t for t in reach if t.container is not None]

    # ---- views ---------------------------------------------------------------------------
    @property
    def done(self) -> bool:
        return self.state == JobState.DONE

    def root_cause(self) -> Failure | None:
        """The earliest failure of the last attempt that failed: in a gang, the first task to
        die usually takes the others down with it, so later failures are consequences."""
        if not self.failures:
            return None
        last = max(f.attempt for f in self.failures)
        return min((f for f in self.failures if f.attempt == last), key=lambda f: f.time)

    def diagnostics(self) -> str:
        """What YARN records as the application's diagnostics (and the client prints)."""
        if self.decision is None:
            return ""
        lines = [f"TonY-py job {self.final_status}: {self.decision.message}"]
        cause = self.root_cause()
        if cause is not None and self.final_status != "SUCCEEDED":
            lines.append(f"Root cause: {cause.headline()}")
            if cause.error and cause.error.get("traceback"):
                lines.append("--- traceback (from the task's error file) ---")
                lines.append(cause.error["traceback"].rstrip()[-3000:])
            if cause.stderr_tail:
                lines.append(f"--- last lines of {cause.task} stderr ---")
                lines.append(cause.stderr_tail.rstrip()[-4000:])
        others = [f for f in self.failures if f is not cause]
        if others:
            lines.append("Other failures (in order): " + "; ".join(f.headline() for f in others[:10]))
        lines.append("Tasks: " + ", ".join(f"{t.name} {t.state.value}" for t in self.tasks.values()))
        return "\n".join(lines)

    def status(self, log_url: Callable[[Task], str | None] = lambda t: None) -> dict:
        with self.lock:
            return {
                "state": self.state.value,
                "final_status": self.final_status,
                "attempt": self.attempt,
                "restarts_used": self.restarts_used,
                "framework": self.spec.framework,
                "diagnostics": self.diagnostics() if self.decision else None,
                "root_cause": (self.root_cause().to_json() if self.root_cause() else None),
                "failures": [f.to_json() for f in self.failures],
                "timeline": dict(self.timeline),
                "messages": self.messages[-20:],
                "tasks": [
                    {
                        "name": t.name,
                        "type": t.id.type,
                        "index": t.id.index,
                        "state": t.state.value,
                        "tracked": t.tracked,
                        "attempt": t.attempt,
                        "host": t.last_container.host if t.last_container else None,
                        "node_id": t.last_container.node_id if t.last_container else None,
                        "container_id": t.last_container.id if t.last_container else None,
                        "resource": t.last_container.resource if t.last_container else None,
                        "address": t.address,
                        "exit_code": t.exit_code,
                        "signal": t.signal,
                        "log_url": log_url(t),
                        "metrics": t.metrics,
                    }
                    for t in self.tasks.values()
                ],
            }
