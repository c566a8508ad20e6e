"""The executor protocol, the AM's side: what each executor call does to the job, and what the
executor is answered.

    register ─▶ spec (long-poll; answered when the gang is complete) ─▶ started ─▶ heartbeat …
    ─▶ result ─▶ answer: exit, or restart at the next gang attempt

Every call names the task, the gang attempt and the container it comes from. A call from a copy
of a task that is no longer current (another container runs the task now, or the job is over)
is answered with an instruction instead: `exit`, or `restart` at the current attempt. Runs under
the job's lock (the coordinator's entry points take it); the HTTP layer is server.py.
"""

from __future__ import annotations

from itertools import chain

from tony_py import frameworks
from tony_py.am.core import events as ev
from tony_py.am.core import policy
from tony_py.am.core.recovery import Recovery
from tony_py.am.core.state import JobCore, JobState
from tony_py.am.core.tasks import Copy, Ending, Task
from tony_py.config.spec import NOTEBOOK_TYPE, TaskId
from tony_py.frameworks.envplan import EnvPlan, SpecAnswer
from tony_py.job.records import FailureKind, TaskState
from tony_py.net import wire


_IN_THE_GANG = frozenset({TaskState.REGISTERED, TaskState.RUNNING, TaskState.PARKED})


class ExecutorProtocol:
    def __init__(self, job: JobCore, recovery: Recovery):
        self.job = job
        self.recovery = recovery
        self._plan: tuple[tuple, dict, EnvPlan] | None = None
        self._announced: set[str] = set()  # fences a waiting gang has been told about
        self._dense: tuple | None = None  # (view, {task: its id in that gang}, gang size): _numbering
        self._stage_tasks: tuple | None = None  # (stage, its tasks): gang_complete
        self._holdout = 0  # where gang_complete found the gang incomplete last

    def answer(self, call: wire.Call) -> dict:
        """The answer to an executor's call that is answered at once (not the spec long-poll)."""
        return _ANSWERS[type(call)](self, call)

    # ---- which copy of a task is calling, and is it current --------------------------------
    def lookup(self, call: wire.Call, alive: bool = True) -> tuple[Task | None, dict | None]:
        """The task an executor call is about, and what to answer instead if the call is stale.
        alive: the call shows its executor reached this AM attempt with its task running (a
        result's does not: it may report what happened while no AM answered)."""
        job = self.job
        name, attempt, container_id = call.task, call.attempt, call.container
        task = job.tasks.get(name)
        if task is None:
            return None, {"action": "exit", "reason": f"unknown task {name}"}
        if not self._current(task, container_id):
            if container_id:
                job.fences.heard_from(container_id, job.clock())  # superseded, and still alive
            return task, self.instruction(task, attempt, container_id)
        task.last_contact = job.clock()
        if attempt > task.attempt:
            self.recovery.catch_up(attempt, f"caught up with {task.name}, which an earlier AM attempt had already "
                                            f"restarted to attempt {attempt}")
        answer = self.instruction(task, attempt, container_id)
        if answer is None and self._registered_unseen(task, call):
            # The earlier AM attempt registered (maybe served) it after its last snapshot: this one
            # knows neither its address nor its view. Each call says so until it registers again.
            answer = {"action": "restart", "attempt": task.attempt, "reason": "registered with an earlier AM "
                      "attempt after its last snapshot: register again (no restart spent)"}
            job.events.record(ev.NOTE, f"{type(call).__name__} from past a registration this AM attempt never saw: "
                                       f"told to register again at attempt {task.attempt}", task.name)
        elif alive:
            task.adopted_at = None  # (heard from by this AM attempt: no longer gone with the last one)
        return task, answer

    def _registered_unseen(self, task: Task, call: wire.Call) -> bool:
        """A spec poll, started, heartbeat, callback or TensorBoard call at the task's attempt
        from a copy re-adopted (and not heard from yet) or kept by a restart while the task is
        ALLOCATED or LAUNCHED here (a kept executor calls at the previous attempt until it
        registers), or, from a re-adopted copy, a sign that it runs (GANG) while this attempt
        served its stage no view. A result is taken as it is: that run is over (_reform_around_an_end)."""
        if isinstance(call, (wire.Register, wire.Result)) or not (task.adopted_at is not None or task.kept):
            return False
        if task.state in (TaskState.ALLOCATED, TaskState.LAUNCHED):
            return True
        job = self.job
        return (task.adopted_at is not None and not isinstance(call, wire.SpecPoll) and job.cluster_view is None
                and job.spec.distributed_mode == "GANG" and job.spec.stage_of(task.id.type) == job.stage)

    @staticmethod
    def _current(task: Task, container_id: str | None) -> bool:
        return task.container is not None and not (container_id and task.container.id != container_id)

    def instruction(self, task: Task, attempt: int, container_id: str | None) -> dict | None:
        """What a stale or superseded executor should do instead; None if it is current."""
        if not self._current(task, container_id):
            return {"action": "exit", "reason": "superseded: this container no longer runs the task"}
        if self.job.decision is not None or task.ending != Ending.NONE:
            return {"action": "exit", "reason": "the job is finishing" if self.job.decision else "the task is over"}
        if attempt != task.attempt:
            return {"action": "restart", "attempt": task.attempt}
        return None

    # ---- registration and the gang ---------------------------------------------------------
    def register(self, call: wire.Register) -> dict:
        job = self.job
        task, stale = self.lookup(call)
        if stale:
            return stale
        if call.gpus:  # the NodeManager assigned these devices itself: they are the truth
            job.gpus.record(task.container.node_id, task.container.id, call.gpus)
            task.gpus = list(call.gpus)
        task.address = f"{task.container.host}:{call.port}"
        task.tb_port = call.tb_port
        task.control_url = f"http://{task.container.host}:{call.control_port}" if call.control_port else None
        task.last_heartbeat = job.clock()
        task.reached(Copy.REGISTERED)
        task.enter(TaskState.REGISTERED, f"its executor registered at {task.address}")
        job.dirty = True
        job.mark("first_executor_registered")
        job.events.record(ev.REGISTERED, f"executor registered at {task.address}", task.name, attempt=task.attempt)
        self.serve_if_complete()
        return {"ok": True, "attempt": task.attempt}

    def gang_complete(self) -> bool:
        """Every task of the current stage registered in this attempt (a sidecar that failed is
        left out). Asked on every registration: the check starts at the task that held the gang
        back last time, so a gang of thousands registering in order costs a step each, not a scan
        each; any answer of True has looked at every task."""
        job = self.job
        if self._stage_tasks is None or self._stage_tasks[0] != job.stage:
            self._stage_tasks = (job.stage, [t for t in job.tasks.values()
                                             if job.spec.stage_of(t.id.type) == job.stage])
        tasks = self._stage_tasks[1]
        start = self._holdout if self._holdout < len(tasks) else 0
        for i in chain(range(start, len(tasks)), range(0, start)):
            t = tasks[i]
            if not (t.state in _IN_THE_GANG or (t.id.type in job.spec.sidecar and t.state == TaskState.FAILED)):
                self._holdout = i
                return False
        return True

    def serve_if_complete(self) -> None:
        """GANG: once every task registered, and no earlier copy of one of them may still be
        running (fencing.py), serve the cluster spec (enters RUNNING, which wakes the waiting
        long-polls). Also called by the watchdog, for fences that run out."""
        job = self.job
        if job.cluster_view is not None or job.spec.distributed_mode != "GANG":
            return
        if not self.gang_complete():
            self._reform_around_an_end()
        elif not self._fenced(t.name for t in job.tasks.values() if job.spec.stage_of(t.id.type) == job.stage):
            self.recovery.serve(self.cluster_view(), f"attempt {job.attempt}: all {len(job.tasks)} tasks "
                                                     "registered; spec served")

    def _reform_around_an_end(self) -> None:
        """After a take-over from a late snapshot: a task succeeded in a run of this attempt that
        the earlier AM attempt served (its result was its first call here) while the others were
        told to register again, and they are back. No gang forms around a run that is over: it
        starts again with all of them at no cost (the earlier attempt's doing, as catch_up); or,
        the chief having succeeded, the model is done (TonY's rule) and so is the job."""
        job = self.job
        tasks = self._stage_tasks[1]
        ended = tasks[self._holdout]  # (where gang_complete stopped)
        if (job.decision is not None or ended.state != TaskState.SUCCEEDED or ended.attempt != job.attempt
                or not all(t.state in _IN_THE_GANG or t.state.finished for t in tasks)):
            return
        why = f"{ended.name} succeeded in attempt {job.attempt}, served by an earlier AM attempt after its snapshot"
        if job.chief_done_at is not None:
            self.recovery.finish(policy.Decision(policy.Action.SUCCEED, f"{why}; the chief succeeded, and the tasks "
                                                 "that registered again cannot run without it"), status="SUCCEEDED")
        else:
            self.recovery.catch_up(job.attempt + 1, f"{why}; the others registered again: the gang starts again "
                                                    "with it (no restart spent)")

    def _fenced(self, names) -> bool:
        """Whether an earlier copy of one of these tasks may still run; said once per fence."""
        job = self.job
        fences = job.fences.holding(names, job.clock())
        for fence in fences:
            if fence.copy not in self._announced:
                self._announced.add(fence.copy)
                job.events.record(ev.NOTE, f"waiting {fence.until - job.clock():.1f} s before starting a new copy: "
                                           f"its copy in {fence.copy} may still run ({fence.why})", fence.task)
        return bool(fences)

    def cluster_view(self) -> dict[str, list[str]]:
        """Addresses of this stage's tasks and of earlier stages' tasks still running."""
        job = self.job
        view: dict[str, list[str]] = {}
        for t in job.tasks.values():
            if t.address and (job.spec.stage_of(t.id.type) == job.stage or not t.state.finished):
                view.setdefault(t.id.type, []).append(t.address)
        return view

    # ---- the spec ----------------------------------------------------------------------------
    def try_spec(self, call: wire.SpecPoll) -> SpecAnswer | dict | None:
        """The answer to a spec long-poll now: the task's env (a SpecAnswer), an instruction for
        a stale executor, or None while the spec does not exist yet."""
        job = self.job
        task, stale = self.lookup(call)
        if stale:
            return stale
        task.last_heartbeat = job.clock()  # a waiting long-poll proves the executor alive
        view = job.cluster_view
        if view is None and job.spec.distributed_mode == "FCFS" and task.address and not self._fenced([task.name]):
            view = self.cluster_view()  # FCFS: each task starts with what has registered so far
            if job.state in (JobState.ALLOCATING, JobState.RESTARTING):
                job.enter(JobState.RUNNING, f"attempt {job.attempt}: first spec served (FCFS)")
        if view is None or not task.address or not frameworks.ready(job.spec, task.id, job.callbacks):
            return None
        job.mark("first_spec_served")
        task.reached(Copy.SERVED)  # from now on this copy may run the task's process
        job.events.record(ev.SPEC_SERVED, "cluster spec served", task.name, attempt=task.attempt)
        plan = self._env_plan(view)
        if view is job.cluster_view:  # (every task of a gang gets the same view: its numbering once)
            dense, size = self._numbering(view)
            return SpecAnswer(self._task_env(task, plan, dense[task.name], size), plan)
        return SpecAnswer(self._task_env(task, plan, job.dense_id(task), self._gang_size()), plan)

    def _numbering(self, view) -> tuple[dict[str, TaskId], int]:
        """Each task's id as the gang of this view numbers it (state.JobCore.dense_id), and the
        gang's tracked size, worked out once per view: a job of thousands asks for each."""
        if self._dense is None or self._dense[0] is not view:
            numbering: dict[str, TaskId] = {}
            seen: dict[str, int] = {}
            for t in sorted(self.job.tasks.values(), key=lambda t: (t.id.type, t.id.index)):
                numbering[t.name] = TaskId(t.id.type, seen.get(t.id.type, 0))
                if t.state != TaskState.PARKED:
                    seen[t.id.type] = seen.get(t.id.type, 0) + 1
            self._dense = (view, numbering, self._gang_size())
        return self._dense[1], self._dense[2]

    def _gang_size(self) -> int:
        return sum(1 for t in self.job.tasks.values() if t.tracked and t.state != TaskState.PARKED)

    def polling(self, name: str, delta: int) -> None:
        """A long-poll of the task's executor started (+1) or ended (-1): alive, not heartbeating."""
        task = self.job.tasks.get(name)
        if task is not None:
            task.polling = max(0, task.polling + delta)

    def _env_plan(self, view: dict[str, list[str]]) -> EnvPlan:
        """The framework's plan for this view, built once per served view (FCFS views differ per
        task and are not kept)."""
        job = self.job
        key = (job.attempt, job.stage, job.callbacks_seen)
        if view is job.cluster_view and self._plan is not None and self._plan[0] == key and self._plan[1] is view:
            return self._plan[2]
        plan = frameworks.plan(job.spec, view, job.callbacks)
        if view is job.cluster_view:
            self._plan = (key, view, plan)
        return plan

    @staticmethod
    def _task_env(task: Task, plan: EnvPlan, dense: TaskId, gang_size: int) -> dict[str, str]:
        env = plan.env(dense)  # a smaller gang numbers its members 0..n-1 (state.JobCore.dense_id)
        if dense != task.id:  # TonY's, set at launch for the full size
            env["TASK_INDEX"] = str(dense.index)
            env["TASK_NUM"] = str(gang_size)
        env["TONY_RESTART_ATTEMPT"] = str(task.attempt)
        # TonY's counters, with TonY's meaning (TonY itself left both at 0: a bug): the session
        # a task belongs to, which user code reads to resume.
        env["SESSION_ID"] = env["ATTEMPT_NUMBER"] = str(task.attempt)
        if task.attempt:
            env["NUM_AM_RETRIES"] = str(task.attempt)
        if task.tb_port:
            env["TB_PORT"] = str(task.tb_port)
        if task.id.type == NOTEBOOK_TYPE and task.address:  # the port its executor reserved for it
            env["NOTEBOOK_PORT"] = task.address.rsplit(":", 1)[1]
        return env

    # ---- while the task runs -----------------------------------------------------------------
    def task_started(self, call: wire.Started) -> dict:
        job = self.job
        task, stale = self.lookup(call)
        if stale:
            return stale
        task.pid = call.pid or 0
        task.started_at = task.last_progress = job.clock()
        task.enter(TaskState.RUNNING, "its user process started")
        job.dirty = True
        job.mark("first_task_started")
        job.events.record(ev.TASK_STARTED, "user process started", task.name, attempt=task.attempt)
        if all(t.state == TaskState.RUNNING or t.state.finished for t in job.tasks.values()):
            job.mark("all_tasks_started")
        return {"ok": True}

    def callback(self, call: wire.Callback) -> dict:
        """A task's process reported something others wait for (Horovod's driver: its port)."""
        job = self.job
        task, stale = self.lookup(call)
        if stale:
            return stale
        job.callbacks[task.name] = {"host": task.container.host, **call.info}
        job.callbacks_seen += 1
        job.events.record(ev.NOTE, f"reported {call.info}", task.name, attempt=task.attempt)
        job.changed()
        return {"ok": True}

    def register_tensorboard(self, call: wire.Tensorboard) -> dict:
        job = self.job
        task, stale = self.lookup(call)
        if stale:
            return stale
        job.tensorboard_url = call.url
        job.dirty = True
        job.events.record(ev.TB_REGISTERED, f"TensorBoard at {call.url}", task.name, url=call.url)
        return {"ok": True}

    def heartbeat(self, call: wire.Heartbeat) -> dict:
        task, stale = self.lookup(call)
        if stale:
            return stale
        task.last_heartbeat = self.job.clock()
        if call.metrics:
            task.metrics = call.metrics
        if call.progress_age_s is not None:
            # An age, not a timestamp: the node's clock need not agree with the AM's.
            task.last_progress = max(task.last_progress or 0.0, task.last_heartbeat - float(call.progress_age_s))
        if task.preempt_deadline is not None:  # repeated until the task ends: the executor acts once
            return {"action": "continue", "preempt": {"deadline": task.preempt_deadline,
                                                      "left_s": round(task.preempt_deadline - task.last_heartbeat, 3)}}
        return {"action": "continue"}

    # ---- the end of a run ----------------------------------------------------------------------
    def report_result(self, call: wire.Result) -> dict:
        """call.preempted: the executor sent the task a preemption's SIGTERM (its word survives an
        AM fail-over, and a process that ended before the warning reached it is not preempted)."""
        job = self.job
        task, stale = self.lookup(call, alive=False)
        if stale:
            return stale
        with_am = task.adopted_at is not None  # re-adopted, and this is the first this attempt hears of it
        task.adopted_at = None
        task.reached(Copy.ENDED)  # the executor saw its process end (and killed what it left)
        task.exit_code = call.exit_code
        task.signal = call.signal
        # An age, not the node's timestamp: failures are ordered on the AM's clock.
        task.finished_at = job.clock() - max(0.0, float(call.ended_ago_s or 0.0))
        if call.metrics:
            task.metrics = call.metrics
        job.dirty = True
        if call.fenced:  # (before this attempt took over: no AM answered it, it went with the last one)
            self.recovery.fail(task, FailureKind.LOST, f"its executor heard nothing from the AM for "
                               f"tony.task.executor.lease-sec={job.spec.lease_s} s and killed it (fenced)"
                               f"{' while no AM attempt answered it' if with_am else ''}",
                               signal=call.signal, stderr_tail=call.stderr_tail, when=task.finished_at,
                               lost_with_am=with_am)
        elif call.exit_code == 0 and not call.signal and not call.preempted:
            self._succeeded(task)
        else:
            if call.preempted and task.preempt_deadline is None:  # warned by an earlier AM attempt
                task.preempt_deadline = task.preempted_at = job.clock()
            self._failed(task, call)
        job.changed()
        if job.decision is None:
            self.serve_if_complete()  # a gang waiting for it may be complete now (a sidecar), or start again
        answer = self.instruction(task, call.attempt, call.container)
        if answer is None:
            # The task's run is over and no restart involves it: its executor may leave,
            # which ends the container and gives the resources back to YARN.
            task.end_copy(Ending.RELEASED)
            answer = {"action": "exit"}
        return answer

    def _succeeded(self, task: Task) -> None:
        job = self.job
        task.enter(TaskState.SUCCEEDED, "its process exited 0")
        if task.id == job.spec.chief():
            job.chief_done_at = job.clock()
        job.events.record(ev.TASK_FINISHED, "succeeded", task.name, attempt=task.attempt, exit_code=0,
                          metrics=dict(task.metrics) or None)
        if policy.stage_done(job.spec, job.tasks, job.stage):
            self.recovery.next_stage()
        else:
            self.recovery.apply(policy.completion(job.spec, job.tasks))

    def _failed(self, task: Task, call: wire.Result) -> None:
        kind = FailureKind.SIGNAL if call.signal else FailureKind.EXIT_CODE
        message = policy.describe_exit(call.exit_code, call.signal)
        if call.timed_out:
            kind = FailureKind.TIMEOUT
            message = (f"killed after running longer than tony.task.executor.execution-timeout-ms="
                       f"{self.job.spec.execution_timeout_ms}")
        error = call.error
        if error and error.get("message"):
            message += f": {error.get('type') or 'error'}: {error['message']}"
        if policy.tokens_expired(call.stderr_tail):
            message += policy.TOKENS_EXPIRED_HINT
        self.recovery.fail(task, kind, message, exit_code=call.exit_code, signal=call.signal,
                           stderr_tail=call.stderr_tail, error=error, when=task.finished_at)


_ANSWERS = {wire.Register: ExecutorProtocol.register, wire.Started: ExecutorProtocol.task_started,
            wire.Heartbeat: ExecutorProtocol.heartbeat, wire.Callback: ExecutorProtocol.callback,
            wire.Tensorboard: ExecutorProtocol.register_tensorboard, wire.Result: ExecutorProtocol.report_result}
