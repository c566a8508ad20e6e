"""A coordinator wired to a fake cluster port and a fake clock, for the unit tests of the AM."""

import json
import time

from tony_py.am.core.coordinator import Coordinator
from tony_py.frameworks.envplan import expand
from tony_py.config.layers import load_conf
from tony_py.config.build import build_job_spec
from tony_py.net import wire


def wait_until(predicate, timeout: float = 30.0) -> bool:
    """Whether predicate() came true within timeout: for an event of a thread or a server in the
    test's own process (generous: a loaded machine is only slower, never wrong)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def served_cluster(answer: dict) -> dict:
    """The cluster a task was served (TonY's CLUSTER_SPEC, shared values expanded)."""
    return json.loads(expand(answer["env"], answer.get("shared"))["CLUSTER_SPEC"])


class FakePort:
    def __init__(self):
        self.requests, self.launched, self.stopped, self.released, self.cancelled = [], [], [], [], []
        self.blacklisted = []
        self.request_ids: dict[str, int] = {}  # the allocation-request id each type was asked under
        self.nodes = 10  # what YARN reports as the cluster's node count
        self.heartbeats: list[int] = []  # each heartbeat interval the AM set, in order

    def request(self, request_id, task_type, count):
        self.requests.append((task_type.name, count))
        self.request_ids[task_type.name] = request_id

    def cancel_requests(self, request_id):
        self.cancelled.append(request_id)

    def launch(self, container_id, launch_spec):
        self.launched.append(container_id)

    def stop(self, container_id):
        self.stopped.append(container_id)

    def release(self, container_id):
        self.released.append(container_id)

    def set_progress(self, progress):
        self.progress = progress

    def set_heartbeat_interval(self, ms):
        self.heartbeats.append(ms)

    def blacklist(self, node_id):
        self.blacklisted.append(node_id)

    def unblacklist(self, node_id):
        self.blacklisted.remove(node_id)

    def node_count(self):
        return self.nodes


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


class Harness:
    def __init__(self, tmp_path, *overrides, start=True):
        self.tmp_path, self.overrides = tmp_path, overrides
        conf = load_conf(None, ["tony.containers.command=python t.py", *overrides], env={}, cwd=tmp_path)
        self.spec = build_job_spec(conf)
        self.cluster = FakePort()
        self.clock = Clock()
        self.c = Coordinator(self.spec, self.cluster, lambda task: {"task": task.name}, clock=self.clock)
        if start:
            self.c.start()
        self.n = 0
        self.containers = {}

    def allocate(self, type_name, host=None):
        """A container on a node of its own (host: on that host, a NodeManager of its own)."""
        self.n += 1
        cid = f"container_{self.n}"
        node_id = f"{host}:{self.n}" if host else f"node{self.n}:1"
        self.c.on_allocated({"id": cid, "node_id": node_id, "host": host or f"host{self.n}",
                             "node_http": f"host{self.n}:8042", "resource": {},
                             "allocation_request_id": self.c.book.ids[type_name], "priority": 0})
        return cid

    def bring_up(self):
        """Allocate, start and register every task; return {task: container}."""
        for task_type in self.spec.types:
            for _ in range(task_type.instances):
                self.allocate(task_type.name)
        for name, task in self.c.tasks.items():
            self.containers[name] = task.container.id
            self.c.on_started(task.container.id)
        for i, name in enumerate(self.c.tasks):
            assert self.register(name, 0, self.containers[name], 2000 + i, None) == {"ok": True, "attempt": 0}
        for name in self.c.tasks:
            assert "env" in self.wait_spec(name, 0, self.containers[name], 0)
            self.task_started(name, 0, self.containers[name], 100)
        return self.containers

    def next_attempt(self, live=None) -> "Harness":
        """The next AM attempt, taken over from this one's snapshot (through JSON, as on HDFS)
        with the containers YARN kept (`live` task names; all by default), not started yet. Every
        task has a control endpoint, so a live one is re-adopted; `adopted`: the tasks whose
        executors are told where the new AM is."""
        from tony_py.am.core.failover import AmSnapshot

        for name in self.containers:
            self.c.tasks[name].control_url = f"http://{name}"
        snap = AmSnapshot.from_dict(json.loads(json.dumps(self.c.snapshot().to_dict())))
        fresh = Harness(self.tmp_path, *self.overrides, start=False)
        live = self.containers if live is None else live
        fresh.adopted = fresh.c.adopt(snap, [{"id": self.containers[name]} for name in live])  # (told the new AM)
        fresh.containers = dict(self.containers)
        return fresh

    # ---- the executor API's calls, as the AM's server makes them (typed: tony_py/net/wire.py) ----
    def register(self, name, attempt, container, port, tb_port=None, control_port=None, gpus=None):
        return self.c.answer(wire.Register(task=name, attempt=attempt, container=container, port=port,
                                             tb_port=tb_port, control_port=control_port, gpus=gpus))

    def try_spec(self, name, attempt, container):
        return self.c.try_spec(wire.SpecPoll(task=name, attempt=attempt, container=container))

    def wait_spec(self, name, attempt, container, timeout):
        return self.c.wait_spec(wire.SpecPoll(task=name, attempt=attempt, container=container, timeout=timeout))

    def task_started(self, name, attempt, container, pid):
        return self.c.answer(wire.Started(task=name, attempt=attempt, container=container, pid=pid))

    def callback(self, name, attempt, container, info):
        return self.c.answer(wire.Callback(task=name, attempt=attempt, container=container, info=info))

    def register_tensorboard(self, name, attempt, container, url):
        return self.c.answer(wire.Tensorboard(task=name, attempt=attempt, container=container, url=url))

    def heartbeat(self, name, attempt, container, metrics=None, progress_age_s=None):
        return self.c.answer(wire.Heartbeat(task=name, attempt=attempt, container=container, metrics=metrics,
                                               progress_age_s=progress_age_s))

    def report_result(self, name, attempt, container, exit_code, signal, stderr_tail="", **details):
        return self.c.answer(wire.Result(task=name, attempt=attempt, container=container, exit_code=exit_code,
                                                signal=signal, stderr_tail=stderr_tail, **details))

    def result(self, name, code=0, signal=None, attempt=0, stderr=""):
        return self.report_result(name, attempt, self.containers[name], code, signal, stderr)

    def complete(self, name, status=0):
        self.c.on_completed(self.containers[name], status, "")
