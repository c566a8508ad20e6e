"""The deferrable TonyOperator's trigger: follows the application from the triggerer's event loop,
holding no worker slot, writes the task table's changes into the log, and fires once YARN says
the application ended (or the ResourceManager stayed unreachable too long).

Each poll is blocking HTTP (tony_py/airflow/follow.py: the RM's REST API and the AM's signed
status.json, the same signing code the client uses) run in a thread with asyncio.to_thread:
tony-py has no async HTTP client among its dependencies, and a second implementation of the
request signing only for the triggerer would be one more thing to keep right.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, AsyncIterator

from airflow.triggers.base import BaseTrigger, TriggerEvent

from tony_py.airflow import follow
from tony_py.airflow.rules import FollowState, task_lines

RM_UNREACHABLE_S = 120.0  # then the event says so, and the operator fails as the infrastructure's


class TonyTrigger(BaseTrigger):
    def __init__(self, **kwargs: Any):
        super().__init__()
        self.state = FollowState.from_kwargs(kwargs)

    def serialize(self) -> tuple[str, dict[str, Any]]:
        return f"{type(self).__module__}.{type(self).__name__}", self.state.to_kwargs()

    async def run(self) -> AsyncIterator[TriggerEvent]:
        state, status, failing_since = self.state, None, None
        self.log.info("following %s (every %.0f s)", state.app_id, state.poll_interval)
        while True:
            try:
                app, status = await asyncio.to_thread(follow.look, state, status)
                failing_since = None
            except OSError as exc:
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > RM_UNREACHABLE_S:
                    yield TriggerEvent(follow.error_event(state, str(exc)))
                    return
                self.log.warning("%s", exc)
                await asyncio.sleep(state.poll_interval)
                continue
            for line in task_lines(state.seen, (status or {}).get("tasks") or []):
                self.log.info("%s", line)
            if follow.done(app):
                yield TriggerEvent(follow.end_event(state, app, status))
                return
            await asyncio.sleep(state.poll_interval)

    async def on_kill(self) -> None:
        """A user marked the deferred task failed or cleared it (Airflow 3.3+): kill the
        application. Through the client (a JVM, in a thread): it works on Kerberos clusters too."""
        await asyncio.to_thread(_kill, self.state.app_id)


def _kill(app_id: str) -> None:
    from tony_py import api

    with api.attach(app_id) as job:
        job.kill("the Airflow task was killed")
