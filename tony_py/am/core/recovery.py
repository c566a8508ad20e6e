"""The restart bookkeeping: a task's failure becomes a decision (policy.py), and the decision
becomes what happens to the job: carry on, restart the gang, move to the next stage, or a
verdict that stops everything still running.

Runs under the job's lock (the coordinator's entry points take it).
"""

from __future__ import annotations

from tony_py.am.core import events as ev
from tony_py.am.core import policy
from tony_py.am.core.failover import AmSnapshot
from tony_py.am.core.policy import Action, Decision
from tony_py.am.core.requests import RequestBook
from tony_py.am.core.state import JobCore, JobState
from tony_py.am.core.tasks import Ending, Task
from tony_py.job.records import Container, Failure, FailureKind, TaskState

# How a task's end reads once YARN warned it would take the container back (timeouts keep theirs).
_ENDS_OF_A_WARNED_TASK = (FailureKind.EXIT_CODE, FailureKind.SIGNAL, FailureKind.LOST, FailureKind.INFRASTRUCTURE)
# How long after a preemption's deadline a peer's end still counts as its consequence.
PREEMPTION_AFTERMATH_S = 10.0
# How long FINISHING waits for stopped containers to report before giving up on them.
FINISH_GRACE_S = 15.0
# How long a node whose executor went silent gets no new container of the job (avoid_node).
AVOID_NODE_S = 30.0
# ... unless the job's containers are asked for and no other node grants one for this long: no
# other node has room, and holding the node back would only make the replacement wait (YARN grants
# what a node has room for within a heartbeat or two of it).
AVOID_UNMET_S = 5.0
# AM heartbeat to the RM: fast while containers are outstanding, relaxed afterwards. Right after
# an ask, a burst: the RM's scheduler grants within milliseconds of hearing it (asynchronous
# scheduling) but hands the containers over only on the AM's next heartbeat, so at 200 ms an ask
# cost up to two intervals (0.45 s measured at 16 workers). The burst lasts until the first grant
# or BURST_S, so an ask the cluster cannot meet never heartbeats at 20 a second for long.
BURST_HEARTBEAT_MS = 50
BURST_S = 1.0
FAST_HEARTBEAT_MS = 200
SLOW_HEARTBEAT_MS = 1000


class Recovery:
    def __init__(self, job: JobCore, cluster, book: RequestBook):
        self.job = job
        self.cluster = cluster
        self.book = book
        self._finishing: list | None = None  # [the tasks, a cursor] while FINISHING (maybe_done)
        # The AM starts bursting (tony_py/am/main.py): its first ask follows registration.
        self._burst_until: float | None = job.clock() + BURST_S  # while heartbeats are BURST_HEARTBEAT_MS

    # ---- containers ------------------------------------------------------------------------
    def request_missing(self) -> int:
        pending: dict[str, int] = {}
        for t in self.job.pending():
            pending[t.id.type] = pending.get(t.id.type, 0) + 1
        asked = self.book.ask(pending)
        if asked:
            self.cluster.set_heartbeat_interval(BURST_HEARTBEAT_MS)
            self._burst_until = self.job.clock() + BURST_S
            self.job.events.record(ev.REQUESTED, f"requested {asked} container(s)", count=asked)
        return asked

    def end_burst(self, now: float | None = None) -> None:
        """Back to the fast heartbeat once a container came or the burst ran out (now=None: a
        grant); the caller relaxes it further once nothing is outstanding."""
        if self._burst_until is not None and (now is None or now >= self._burst_until):
            self._burst_until = None
            self.cluster.set_heartbeat_interval(FAST_HEARTBEAT_MS)

    # ---- failures --------------------------------------------------------------------------
    def fail(self, task: Task, kind: FailureKind, message: str, container: Container | None = None,
             apply: bool = True, **details) -> None:
        """Record a failure of the task's current attempt and (with apply) decide what follows."""
        job = self.job
        container = container or task.container
        if task.preempt_deadline is not None and kind in _ENDS_OF_A_WARNED_TASK:
            # YARN announced it would take the container back and the task was told: however it
            # ended (its own exit after a checkpoint, the kill, its executor going with it), that
            # is the preemption, not a failure of the task's.
            lead = task.preempt_deadline - (task.preempted_at or job.clock())
            message = f"preempted: YARN took its container back ({lead:.0f} s warning, SIGTERM sent); it ended: {message}"
            kind = FailureKind.PREEMPTED
        elif kind in _ENDS_OF_A_WARNED_TASK and "during_preemption_of" not in details:
            # A peer that ends while another task of the gang is being preempted (a collective
            # broken by the preempted one's exit) ends because of it: the cluster's doing too.
            warned = next((t.name for t in job.tasks.values() if t is not task and t.attempt == task.attempt
                           and t.preempt_deadline is not None
                           and job.clock() <= t.preempt_deadline + PREEMPTION_AFTERMATH_S), None)
            if warned is not None:
                details["during_preemption_of"] = warned
                message += f" (while {warned} was being preempted)"
        failure = Failure(
            task=task.name, attempt=task.attempt, kind=kind, message=message,
            time=details.pop("when", None) or job.clock(),
            host=details.pop("host", None) or (container.host if container else None),
            container_id=details.pop("container_id", None) or (container.id if container else None),
            **details,
        )
        job.failures.append(failure)
        task.failure = failure
        task.enter(TaskState.PREEMPTED if kind == FailureKind.PREEMPTED else TaskState.FAILED, message)
        task.finished_at = failure.time
        job.dirty = True
        job.events.record(ev.TASK_FINISHED, message, task.name, attempt=task.attempt, failure_kind=kind.value,
                          exit_code=failure.exit_code, signal=failure.signal, metrics=dict(task.metrics) or None)
        if task.container is not None and kind in (FailureKind.LOST, FailureKind.TIMEOUT, FailureKind.LAUNCH):
            # The executor may be hung or cut off: it must not go on running the task. A
            # container that never started is given back instead (there is nothing to stop).
            task.end_copy(Ending.RELEASED)
            if task.container_started:
                self.cluster.stop(task.container.id)
            else:
                self.cluster.release(task.container.id)
        if container is not None and policy.counts_against_node(kind):
            self.count_node_failure(container.node_id)
        if job.decision is not None or not apply:
            return
        self.after_failure(task)

    def after_failure(self, task: Task) -> None:
        job = self.job
        queue_note = (f"YARN preempted the job's containers {job.preemptions} time(s) in queue {job.spec.queue}"
                      if job.preemptions else "")
        decision = policy.after_failure(job.spec, job.tasks, task, job.restarts_used, job.infra_restarts_used,
                                        queue_note)
        if (decision.action == Action.CONTINUE and job.spec.distributed_mode == "GANG"
                and job.cluster_view is None and task.id.type not in job.spec.sidecar):
            # The gang can never be complete without it: starting the others would hang them.
            decision = Decision(Action.FAIL, f"{task.failure.headline()}, before every task had registered; "
                                "a GANG job cannot start without it", task.failure)
        self.apply(decision)

    def count_node_failure(self, node_id: str) -> None:
        job = self.job
        count = job.node_failures[node_id] = job.node_failures.get(node_id, 0) + 1
        if node_id not in job.blacklisted and policy.blacklist_node(job.spec, count):
            job.blacklisted.add(node_id)
            if job.avoided.pop(node_id, None) is None:  # (an avoided node is on YARN's list already)
                self.cluster.blacklist(node_id)
            job.events.record(ev.NODE_BLACKLISTED, f"blacklisted {node_id} for this job: {count} task failures "
                                                   f"there (tony.task.max-failures-per-node="
                                                   f"{job.spec.max_failures_per_node})", node_id=node_id)

    def avoid_node(self, node_id: str, why: str) -> None:
        """An executor on the node went silent while YARN still counts the node healthy (its path
        to the AM cut, the executor frozen): a replacement placed there would likely be cut off
        too and cost a second restart. The node gets no new container for AVOID_NODE_S, unless
        that would leave the job no node at all."""
        job = self.job
        if node_id in job.blacklisted:
            return
        if node_id not in job.avoided and len(job.blacklisted | set(job.avoided)) + 1 >= self.cluster.node_count():
            job.events.record(ev.NOTE, f"not avoiding {node_id} ({why}): it is the last node the job may use",
                              node_id=node_id)
            return
        if node_id not in job.avoided and self._host_holds_every_known_node(node_id):
            # YARN holds back a host, not a NodeManager: where several NodeManagers share the
            # node's host name and the job knows no other host, the hold would leave the
            # replacement nowhere to go (the process cluster's NodeManagers are all localhost).
            job.events.record(ev.NOTE, f"not avoiding {node_id} ({why}): every node the job knows shares its host "
                                       "name, and YARN holds back whole hosts", node_id=node_id)
            return
        if node_id not in job.avoided:
            self.cluster.blacklist(node_id)
            job.events.record(ev.NOTE, f"no new container on {node_id} for {AVOID_NODE_S:.0f} s: {why}",
                              node_id=node_id)
        job.avoided[node_id] = job.clock() + AVOID_NODE_S

    def _host_holds_every_known_node(self, node_id: str) -> bool:
        """Several of the nodes the job has had containers on share this node's host name, and
        every other host it knows is held back already. (One node known says nothing about the
        others: the node count check and AVOID_UNMET_S cover a cluster with no room elsewhere.)"""
        def host(n: str) -> str:
            return n.rsplit(":", 1)[0]
        known = {c.node_id for t in self.job.tasks.values() for c in (t.container, t.last_container) if c}
        held = {host(n) for n in self.job.blacklisted | set(self.job.avoided)}
        here = host(node_id)
        return len({n for n in known if host(n) == here}) > 1 and not ({host(n) for n in known} - held - {here})

    def lift_avoided(self, now: float) -> None:
        """Nodes held back past AVOID_NODE_S, or all of them once a request has gone unmet for
        AVOID_UNMET_S (the nodes left cannot take the replacement: the hold would only delay it)."""
        job = self.job
        unmet_s = self.book.unmet_for(now)
        unmet = unmet_s >= AVOID_UNMET_S
        for node_id, until in list(job.avoided.items()):
            if until <= now or unmet:
                del job.avoided[node_id]
                if node_id not in job.blacklisted:
                    self.cluster.unblacklist(node_id)
                if until > now:
                    job.events.record(ev.NOTE, f"{node_id} takes new containers again: no other node granted "
                                               f"one in {unmet_s:.0f} s", node_id=node_id)

    # ---- copies of a task (fencing.py) ----------------------------------------------------------
    def supersede(self, task: Task, why: str) -> None:
        """The task's current copy stops being its copy: if it may still be running the task's
        process, fence it, so no replacement starts before its lease has run out."""
        job = self.job
        copy = task.container or task.last_container
        if copy is None or not task.may_run:
            return
        fence = job.fences.fence(task.name, copy.id, task.last_contact or job.clock(), why)
        job.events.record(ev.NOTE, f"fenced its copy in {copy.id} on {copy.host} ({why}): no new copy of it starts "
                                   f"for {max(0.0, fence.until - job.clock()):.1f} s, unless YARN sees that container "
                                   "end first", task.name, container_id=copy.id)

    def replace(self, task: Task, why: str, count_node: bool = True) -> None:
        """A copy kept for an in-place restart is lost before its executor came back (typically the
        same fault that caused the restart): part of that restart, not a new failure. Replace it
        without spending another restart."""
        job = self.job
        container = task.container or task.last_container
        self.supersede(task, why)
        if task.container is not None:
            self.cluster.stop(task.container.id)
            job.gpus.release(task.container.id)
        task.start_over(task.attempt, keep_container=False, why=why)
        self.request_missing()
        job.events.record(ev.NOTE, f"{why}: requested a new container for it (no restart spent)", task.name,
                          container_id=container.id if container else None)
        if container is not None and count_node:
            self.count_node_failure(container.node_id)

    # ---- a smaller gang (tony.<type>.min-instances) -----------------------------------------------
    def shrink(self, why: str) -> bool:
        """The allocation timeout fired (`why`): if the gang can do without the tasks YARN did not
        grant (every type keeps at least its min-instances), park them, withdraw their requests
        and serve the rest, whose ranks, WORLD_SIZE and TF_CONFIG then number only them. The next
        gang restart asks for the parked tasks again. False: the job cannot shrink."""
        job = self.job
        pending = job.pending()
        missing: dict[str, list[Task]] = {}
        for task in pending:
            missing.setdefault(task.id.type, []).append(task)
        if not missing or job.spec.distributed_mode != "GANG":
            return False
        if any(t.id == job.spec.chief() for t in pending):
            return False  # TonY's rules end the job with its chief: a gang never goes on without it
        sizes = {}
        for name, tasks in missing.items():
            task_type = job.spec.type(name)
            active = sum(1 for t in job.tasks.values() if t.id.type == name and t.state != TaskState.PARKED)
            if active - len(tasks) < task_type.fewest:
                return False
            sizes[name] = (active, active - len(tasks), task_type.fewest)
        self.book.cancel(missing)
        for tasks in missing.values():
            for task in tasks:
                task.enter(TaskState.PARKED, f"the gang went on without it ({why})")
        job.dirty = True
        names = ", ".join(t.name for tasks in missing.values() for t in tasks)
        change = "; ".join(f"{name} {before} -> {after} (min {fewest})" for name, (before, after, fewest) in sizes.items())
        job.events.record(ev.RESIZE, f"the gang goes on smaller: {change}; {names} parked until the next restart "
                                     f"({why})", sizes={n: s[1] for n, s in sizes.items()}, parked=names)
        return True  # the caller serves the smaller gang's spec (protocol.serve_if_complete)

    # ---- decisions -------------------------------------------------------------------------
    def apply(self, decision: Decision) -> None:
        if decision.action == Action.CONTINUE or self.job.decision is not None:
            self.update_progress()
            return
        if decision.action == Action.RESTART:
            self.restart(decision)
        else:
            self.finish(decision, status="SUCCEEDED" if decision.action == Action.SUCCEED else "FAILED")

    def next_stage(self) -> None:
        """Every tracked task of the prepare stage succeeded: request the training stage."""
        job = self.job
        job.stage += 1
        job.cluster_view = None
        job.mark(f"stage_{job.stage}_requested")
        job.enter(JobState.ALLOCATING, f"stage {job.stage}: requesting {', '.join(job.spec.stages[job.stage])}")
        self.request_missing()

    def serve(self, view: dict[str, list[str]], why: str) -> None:
        """The gang is complete: its cluster view is served (the waiting long-polls wake)."""
        job = self.job
        job.cluster_view = view
        job.mark("all_executors_registered")
        job.enter(JobState.RUNNING, why)

    def catch_up(self, attempt: int, why: str) -> None:
        """An executor reports an attempt this AM never ordered: the previous AM attempt restarted
        the gang and died before its snapshot said so. Move the whole gang past it; the restart
        was the old AM's, so it costs nothing again."""
        job = self.job
        job.attempt = attempt - 1
        job.restarts_used -= 1
        self.restart(Decision(Action.RESTART, why))

    def take_over(self, snap: AmSnapshot) -> None:
        """The job's counters and views as an earlier AM attempt left them (am/core/adoption.py)."""
        job = self.job
        job.attempt, job.restarts_used = snap.attempt, snap.restarts_used
        job.infra_restarts_used, job.preemptions = snap.infra_restarts_used, snap.preemptions
        job.cluster_view, job.started_at = snap.cluster_view, snap.started_at
        job.chief_done_at = snap.chief_done_at
        job.stage, job.callbacks, job.tensorboard_url = snap.stage, dict(snap.callbacks), snap.tensorboard_url
        job.failures = list(snap.failures)
        job.node_failures = dict(snap.node_failures)
        job.blacklisted.update(snap.blacklisted)

    def restart(self, decision: Decision) -> None:
        job = self.job
        if decision.failure is not None and policy.is_infrastructure(decision.failure):
            job.infra_restarts_used += 1  # the cluster's doing: the user's retries stay untouched
            budget = (f"infrastructure restart {job.infra_restarts_used} of "
                      f"{job.spec.max_infrastructure_restarts}")
        else:
            job.restarts_used += 1
            budget = f"gang restart {job.restarts_used} of {job.spec.am_retry_count}"
        job.attempt += 1
        job.timeline[f"restart_decided@{job.attempt}"] = job.clock()
        job.cluster_view = None
        job.chief_done_at = None
        job.events.record(ev.RESTART_DECIDED, decision.message, attempt=job.attempt)
        job.enter(JobState.RESTARTING, f"{budget}: attempt {job.attempt}")
        job.callbacks.clear()
        parked = [t.name for t in job.tasks.values() if t.state == TaskState.PARKED]
        if parked:
            job.events.record(ev.RESIZE, f"asking for {', '.join(parked)} again: the gang grows back to its full size "
                                         "if YARN grants them within the allocation timeout", parked=", ".join(parked))
        for task in job.tasks.values():
            if job.spec.stage_of(task.id.type) < job.stage and task.state.finished:
                continue  # an earlier stage that completed is not run again
            keep = policy.keep_on_restart(job.spec, task, job.clock())
            if not keep:
                self.supersede(task, f"gang restart to attempt {job.attempt}")
            if task.container is not None and not keep:
                if not task.released:  # (a lost or hung executor's was stopped when it failed)
                    self.cluster.stop(task.container.id)
                # Its devices go to the replacement now, not when the end of the stopped container
                # arrives (which may come after the new allocation): the stopped process is killed
                # at once, the replacement's user process starts only after its executor registered.
                job.gpus.release(task.container.id)
            task.start_over(job.attempt, keep_container=keep, why=f"gang restart to attempt {job.attempt}")
            if keep:
                task.launched_at = job.clock()  # the registration timeout starts over
        self.request_missing()

    def finish(self, decision: Decision, status: str) -> None:
        job = self.job
        job.decision = decision
        job.final_status = status
        job.finish_deadline = job.clock() + FINISH_GRACE_S
        job.mark("verdict")
        job.events.record(ev.VERDICT, f"job {status}: {decision.message}", status=status)
        job.enter(JobState.FINISHING, f"job {status}")
        self.book.cancel()
        for task in job.tasks.values():
            if task.container is not None and not task.state.finished:
                task.end_copy(Ending.STOPPING)
                self.cluster.stop(task.container.id)
            elif task.state == TaskState.PENDING:
                task.enter(TaskState.STOPPED, f"the job ended ({status}) before it had a container")
        self.update_progress()
        self.maybe_done()

    def maybe_done(self) -> None:
        """DONE once no container is left to end (or FINISH_GRACE_S ran out). Called on every
        container's end: a task that stopped being waited for in FINISHING is never waited for
        again (no container is granted then), so a cursor passes each task once, not once per end."""
        job = self.job
        if job.state != JobState.FINISHING:
            return
        if self._finishing is None:
            self._finishing = [list(job.tasks.values()), 0]
        order, cursor = self._finishing
        while cursor < len(order) and not _waited_for(order[cursor]):
            cursor += 1
        self._finishing[1] = cursor
        if cursor == len(order) or (job.finish_deadline and job.clock() >= job.finish_deadline):
            for task in order[cursor:]:
                if _waited_for(task) and not task.state.finished:
                    task.enter(TaskState.STOPPED, f"its container did not end within {FINISH_GRACE_S:.0f} s "
                                                  "of the verdict")
            job.mark("done")
            job.enter(JobState.DONE)

    def update_progress(self) -> None:
        tracked = [t for t in self.job.tasks.values() if t.tracked and t.state != TaskState.PARKED]
        done = sum(1 for t in tracked if t.state.finished)
        self.cluster.set_progress(done / len(tracked) if tracked else 1.0)


def _waited_for(task: Task) -> bool:
    """FINISHING waits for this task's container to end."""
    return task.container is not None and (not task.state.finished or task.stopping)
