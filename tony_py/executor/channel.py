"""The executor's side of the executor API: signed JSON over HTTP to the AM.

Standard library only: the executor runs on cluster nodes with nothing but a python3 and what
the client shipped. Requests are signed with the app secret and answers must be signed for
them (tony_py/auth.py): the secret itself never crosses the network, and an answer from
anything but the job's AM is treated like no answer at all, whatever its status says. Answers
are read up to a size cap before their signature is checked. Every signed answer renews the
executor's lease on its task (lease.py), from when its request was sent.
"""

from __future__ import annotations

import logging
import time
import urllib.parse

from tony_py.auth import AuthError, KeepAlive, Signer, call_signed, json_answer
from tony_py.executor.lease import Lease
from tony_py.net import wire

log = logging.getLogger("tony.executor.channel")

MAX_ANSWER = 4 << 20  # a JSON answer (a large TensorFlow job's spec is well under it)
MAX_SRC_ANSWER = 9 << 20  # the zipped src_dir the AM serves (at most 8 MiB: am/launch.py)


class AmUnreachable(Exception):
    """The AM did not answer (with a valid signature) for longer than the executor may wait."""


class RequestRefused(Exception):
    """The AM answered, signed, with a client error (4xx): retrying the same call cannot help."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status


class AmChannel:
    def __init__(self, base_url: str, signer: Signer, give_up_after_s: float, lease: Lease | None = None):
        self.base_url = base_url.rstrip("/")
        self.signer = signer
        self.give_up_after_s = give_up_after_s
        self.lease = lease or Lease(give_up_after_s)
        self.last_contact = time.monotonic()  # when the AM last answered (giving up counts from it)
        self.connection = KeepAlive()  # one connection for the executor's calls, not one each

    def heard(self, sent_at: float) -> None:
        """The AM answered (signed, not an error of its own) a request sent at `sent_at`."""
        self.last_contact = time.monotonic()
        self.lease.renew(sent_at)

    def call(self, method: str, target: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, dict | None]:
        """Retries failed connections, server errors and unsigned or garbled answers until the AM
        has been silent for give_up_after_s. A signed client error is final."""
        return self._call(method, target, body, timeout, json_answer, MAX_ANSWER)

    def call_gzip_ok(self, method: str, target: str, timeout: float = 10.0) -> tuple[int, dict | None]:
        """call, for a large answer the AM may compress (the spec)."""
        return self._call(method, target, None, timeout, json_answer, MAX_ANSWER, gzip_ok=True)

    def call_raw(self, method: str, target: str, body: dict | None = None, timeout: float = 10.0,
                 max_bytes: int = MAX_SRC_ANSWER) -> tuple[int, bytes]:
        """call, for an answer that need not be JSON (the src_dir archive)."""
        return self._call(method, target, body, timeout, bytes, max_bytes)

    def _call(self, method: str, target: str, body: dict | None, timeout: float, parse, max_bytes: int,
              gzip_ok: bool = False):
        delay = 0.2
        while True:
            sent_at = time.monotonic()
            try:
                status, raw = call_signed(self.signer, self.base_url, method, target, body, timeout,
                                          keep_alive=self.connection, max_bytes=max_bytes, gzip_ok=gzip_ok)
                if status < 500:
                    self.heard(sent_at)
                if status < 400:
                    return status, parse(raw)
                try:
                    detail = str((json_answer(raw) or {}).get("error", ""))[:300]
                except (ValueError, AttributeError):
                    detail = ""
                if status < 500:
                    raise RequestRefused(status, detail)
                error: Exception = RuntimeError(f"HTTP {status}: {detail}")
            except (AuthError, OSError, TimeoutError, ValueError) as exc:
                error = exc  # an unsigned answer (UnsignedAnswer) says nothing, whatever its status
            silent = time.monotonic() - self.last_contact
            if silent > self.give_up_after_s:
                raise AmUnreachable(f"no valid answer from the AM at {self.base_url} for {silent:.0f} s: {error}") from None
            log.warning("AM call %s %s failed (%s); retrying", method, target.split("?")[0], error)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def post(self, path: str, body: dict) -> dict:
        _, answer = self.call("POST", path, body)
        return answer or {}

    def send(self, request: wire.Request) -> dict:
        """A call to the AM (tony_py/net/wire.py), posted."""
        return self.post(request.PATH, request.to_body())

    def job(self, task: str) -> dict:
        """What the job runs (its JobSpec and tony-final.xml): served by the AM, so a task
        container localizes no file of this job."""
        _, answer = self.call("GET", "/v1/job?" + urllib.parse.urlencode({"task": task}))
        if not isinstance(answer, dict) or not isinstance(answer.get("spec"), dict):
            raise ValueError("the AM's job answer has no spec")
        return answer

    def download_src(self, task: str, dest) -> int:
        """The zipped src_dir, from the AM, into dest; its size."""
        _, raw = self.call_raw("GET", "/v1/src?" + urllib.parse.urlencode({"task": task}), timeout=120.0)
        dest.write_bytes(raw)
        return len(raw)

    def wait_spec(self, task: str, attempt: int, container: str, timeout: float = 20.0) -> dict | None:
        poll = wire.SpecPoll(task=task, attempt=attempt, container=container, timeout=timeout)
        status, answer = self.call_gzip_ok(poll.METHOD, poll.target(), timeout=timeout + 10)  # (the AM waits up to timeout)
        return answer if status == 200 else None

