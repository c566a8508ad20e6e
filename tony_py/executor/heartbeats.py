"""A running task's heartbeats, and the fence that ends the task when its lease runs out.

Each heartbeat goes out on a lane of its own (its own connection, its own signing principal) and
a new one leaves every interval whether or not the last was answered: a heartbeat stuck in TCP's
retransmission backoff on a lossy link never holds back the next, so losing a third of the
packets does not look like losing the executor. A lane carries one request at a time, so each
lane's sequence numbers still only grow (tony_py/auth.py refuses anything else as a replay).

Every answer renews the lease (lease.py) from when its request was sent; an instruction in one
(restart, exit: this copy of the task is superseded or the job is over) is kept for the
supervisor. When the lease runs out, this thread kills the task at once, whatever the supervisor
is doing (it may be blocked in another call to an AM that no longer answers): no replacement of
the task can have started yet (tony_py/am/core/fencing.py), and none starts before this one is dead.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable

from tony_py.auth import AuthError, KeepAlive, Signer, call_json
from tony_py.executor.channel import AmChannel
from tony_py.net.wire import Heartbeat

log = logging.getLogger("tony.executor")

LANES = 3
CHECK_S = 0.05  # how often the lease is looked at (a fence kill is this late at most)


class _Lane:
    def __init__(self, signer: Signer):
        self.signer = signer
        self.connection = KeepAlive()
        self.busy = False


class Heartbeats:
    def __init__(self, channel: AmChannel, secret: str, principal: str, interval_s: float,
                 body: Callable[[], dict], fence: Callable[[], None],
                 tokens: Callable[[object], None] = lambda offer: None):
        self.channel = channel
        self.interval_s = interval_s
        self.body = body  # the next heartbeat's body (a wire.Heartbeat's: task, attempt, container, metrics, ...)
        self.fence = fence  # kills the task's process group
        self.tokens = tokens  # renewed delegation tokens on offer (tony_py/executor/tokens.py)
        self.lanes = [_Lane(Signer(secret, f"{principal}.hb{i}")) for i in range(LANES)]
        self.instruction: dict | None = None  # an answer that is not "continue"
        self.preempt: dict | None = None  # YARN will take the container back: {"left_s", "sent_at" (monotonic)}
        self.refused: str | None = None  # a signed client error: a bug on one side, not a fault
        self.fenced = threading.Event()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="heartbeats", daemon=True)

    def start(self) -> "Heartbeats":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2.0)

    def _loop(self) -> None:
        next_beat = 0.0
        while not self._stop.wait(CHECK_S):
            now = time.monotonic()
            if self.channel.lease.expired(now) and not self.fenced.is_set():
                self.fenced.set()
                log.error("no answer from the AM for %.1f s (tony.task.executor.lease-sec=%g): killing the task, "
                          "which another copy may replace", self.channel.lease.silent_for(now),
                          self.channel.lease.period_s)
                self.fence()
            if now >= next_beat and not self.fenced.is_set():
                lane = self._free_lane()
                if lane is not None:
                    next_beat = now + self.interval_s
                    threading.Thread(target=self._beat, args=(lane, self.body()), name="heartbeat",
                                     daemon=True).start()

    def _free_lane(self) -> _Lane | None:
        with self._lock:
            lane = next((lane for lane in self.lanes if not lane.busy), None)
            if lane is not None:
                lane.busy = True
            return lane

    def _beat(self, lane: _Lane, body: dict) -> None:
        sent_at = time.monotonic()
        try:
            status, answer = call_json(lane.signer, self.channel.base_url, Heartbeat.METHOD, Heartbeat.PATH, body,
                                       timeout=LANES * self.interval_s, keep_alive=lane.connection)
        except (AuthError, OSError, ValueError) as exc:  # unsigned, unreachable, garbled: no answer at all
            log.debug("heartbeat on lane %s failed: %s", lane.signer.principal, exc)
            return
        finally:
            lane.busy = False
        if status >= 500:
            return
        self.channel.heard(sent_at)
        if status >= 400:
            self.refused = f"HTTP {status}: {str((answer or {}).get('error', ''))[:300]}"
        elif isinstance(answer, dict) and answer.get("action") in ("exit", "restart"):
            self.instruction = answer
        elif isinstance(answer, dict):
            if isinstance(answer.get("preempt"), dict):  # what is left counts from when this was sent
                self.preempt = {**answer["preempt"], "sent_at": sent_at}
            if answer.get("tokens"):
                self.tokens(answer["tokens"])
