"""The executor's side of the executor API: JSON over HTTP to the AM, with the app secret.

Standard library only: the executor runs on cluster nodes with nothing but a python3 and what
the client shipped, and it talks to one server on the cluster's own network.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.error
import urllib.parse
import urllib.request

log = logging.getLogger("tony.executor.channel")


class AmUnreachable(Exception):
    """The AM did not answer for longer than the executor may wait."""


class AmChannel:
    def __init__(self, base_url: str, secret: str, give_up_after_s: float):
        self.base_url = base_url.rstrip("/")
        self._auth = f"Bearer {secret}"
        self.give_up_after_s = give_up_after_s
        self.last_contact = time.monotonic()

    def _call(self, method: str, path: str, body: dict | None, timeout: float) -> tuple[int, dict | None]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Authorization", self._auth)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
            self.last_contact = time.monotonic()
            return resp.status, (json.loads(raw) if raw else None)

    def call(self, method: str, path: str, body: dict | None = None, timeout: float = 10.0) -> tuple[int, dict | None]:
        """Retries failed connections, server errors and garbled answers until the AM has been
        silent for give_up_after_s. A 401 or another client error is final."""
        delay = 0.2
        while True:
            try:
                return self._call(method, path, body, timeout)
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode(errors="replace")[:300]
                if exc.code == 401:
                    raise AmUnreachable(f"the AM refused our secret (401): {detail}") from None
                if exc.code < 500:
                    raise RuntimeError(f"{method} {path}: HTTP {exc.code}: {detail}") from None
                error: Exception = exc
            except (urllib.error.URLError, OSError, TimeoutError, http.client.HTTPException, ValueError) as exc:
                error = exc
            silent = time.monotonic() - self.last_contact
            if silent > self.give_up_after_s:
                raise AmUnreachable(f"no answer from the AM at {self.base_url} for {silent:.0f} s: {error}") from None
            log.warning("AM call %s %s failed (%s); retrying", method, path, error)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def post(self, path: str, body: dict) -> dict:
        _, answer = self.call("POST", path, body)
        return answer or {}

    def wait_spec(self, task: str, attempt: int, container: str, timeout: float = 20.0) -> dict | None:
        query = urllib.parse.urlencode({"task": task, "attempt": attempt, "container": container, "timeout": timeout})
        status, answer = self.call("GET", f"/v1/spec?{query}", timeout=timeout + 10)
        return answer if status == 200 else None
