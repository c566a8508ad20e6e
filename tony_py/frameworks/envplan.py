"""A framework's environment for every task of one cluster view, computed once per view.

What a task's environment holds that depends on the whole cluster (TensorFlow's cluster in
CLUSTER_SPEC and TF_CONFIG, Horovod's slot plan) is the same for many tasks. A plan holds
those values once (`shared`), and env values refer to them as `${tony:NAME}`; the AM sends a
task its env plus the shared values it refers to, serialized once per view, and the executor
expands the references (`expand`). A 2,000-task TensorFlow job therefore sends each task the
cluster once instead of three times (the view, CLUSTER_SPEC, TF_CONFIG, each escaped), with no
per-task JSON encoding of it, and a PyTorch task, which needs no cluster, gets none.

On the wire (`SpecAnswer.wire`) the shared values come first, so their bytes, compressed or not,
and the state of the sha256 the answer's signature covers are made once per view: each task's
answer adds only its own env (a gzip member of its own where the executor takes gzip; gzip's
members concatenate). A 10,000-task TensorFlow cluster is ~270 KB of JSON and ~50 KB gzipped.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
from typing import Callable

_TOKEN = re.compile(r"\$\{tony:([a-z_]+)\}")


def ref(name: str) -> str:
    """The reference to shared value `name` inside an env value."""
    return "${tony:%s}" % name


def compact(value) -> str:
    """How a shared value is written where it is referenced: compact JSON."""
    return json.dumps(value, separators=(",", ":"))


def expand(env: dict[str, str], shared: dict | None) -> dict[str, str]:
    """The env as the task sees it: every reference replaced by its shared value."""
    if not shared:
        return dict(env)
    texts: dict[str, str] = {}

    def text(m: re.Match) -> str:
        name = m.group(1)
        if name not in shared:
            raise ValueError(f"the spec refers to an unknown shared value {name!r}")
        if name not in texts:
            texts[name] = compact(shared[name])
        return texts[name]

    return {k: _TOKEN.sub(text, v) if "${tony:" in v else v for k, v in env.items()}


class EnvPlan:
    def __init__(self, env_for: Callable[..., dict[str, str]], shared: dict | None = None):
        self.env_for = env_for
        self.shared = shared or {}
        self._json: dict[frozenset, bytes] = {}
        self._heads: dict[tuple[frozenset, bool], tuple[bytes, object]] = {}

    def env(self, task) -> dict[str, str]:
        return self.env_for(task)

    def referenced(self, env: dict[str, str]) -> frozenset:
        return frozenset(m.group(1) for v in env.values() if "${tony:" in v for m in _TOKEN.finditer(v))

    def shared_json(self, names: frozenset) -> bytes:
        """The shared values `names`, as a JSON object, serialized once per set of names."""
        if names not in self._json:
            self._json[names] = json.dumps({n: self.shared[n] for n in sorted(names)},
                                           separators=(",", ":")).encode()
        return self._json[names]

    def head(self, names: frozenset, gzipped: bool) -> tuple[bytes, object]:
        """The start of every answer that refers to `names` (the shared values, then the key of
        the task's env), as sent, and a sha256 that has hashed it: made once per view."""
        key = (names, gzipped)
        if key not in self._heads:
            raw = b'{"shared":' + self.shared_json(names) + b',"env":'
            sent = gzip.compress(raw, compresslevel=6, mtime=0) if gzipped else raw
            self._heads[key] = (sent, hashlib.sha256(sent))
        return self._heads[key]


class SpecAnswer:
    """The answer to a task's spec long-poll: its env and the shared values it refers to."""

    def __init__(self, env: dict[str, str], plan: EnvPlan):
        self.env = env
        self.plan = plan

    def to_dict(self) -> dict:
        names = self.plan.referenced(self.env)
        return {"env": self.env, "shared": {n: self.plan.shared[n] for n in names}}

    def wire(self, gzipped: bool = False) -> tuple[bytes, str]:
        """The answer's body as sent (gzip-compressed, or JSON) and its sha256 hex digest (what its
        signature covers): only the task's own env is encoded, compressed and hashed here."""
        head, hashed = self.plan.head(self.plan.referenced(self.env), gzipped)
        tail = json.dumps(self.env).encode() + b"}"
        if gzipped:
            tail = gzip.compress(tail, compresslevel=1, mtime=0)
        digest = hashed.copy()
        digest.update(tail)
        return head + tail, digest.hexdigest()
