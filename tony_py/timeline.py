"""Where the client's seconds go, for bench/startup.py: with TONY_CLIENT_TIMELINE=<file> set,
each mark appends one JSON line `{"phase": …, "t": <epoch s>}`; unset (always, for users) a
mark costs one dictionary lookup."""

from __future__ import annotations

import json
import os
import time

ENV = "TONY_CLIENT_TIMELINE"


def mark(phase: str) -> None:
    path = os.environ.get(ENV)
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"phase": phase, "t": time.time()}) + "\n")
