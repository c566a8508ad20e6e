"""Which `tony.*` keys TonY-py reads, which TonY keys it does not, and warnings for the rest.

A key TonY-py does not act on must never be silently ignored: a TonY key it does not support
gets one warning line saying so (and why), and an unknown key that looks like a typo of a known
one gets a "did you mean". Keys from the built-in defaults are never warned about.
"""

from __future__ import annotations

import difflib
import re

from tony_py.config import keytable
from tony_py.config.layers import TonyConf

# Derived from the declarations (keytable.py): names read as they are, families with a name
# inside, and the tony.<type>.<suffix> keys read for every job type.
SUPPORTED = frozenset(k.name for k in keytable.KEYS if "<" not in k.name)
PER_TYPE = frozenset(k.name.split(".", 2)[2] for k in keytable.KEYS if k.name.startswith(f"tony.{keytable.TYPE}."))
SUPPORTED_PATTERNS = tuple(pattern for pattern, k in keytable.TEMPLATES if not k.name.startswith(f"tony.{keytable.TYPE}."))

# TonY keys with no effect in TonY-py, and why.
_NOT_NEEDED = "TonY-py's executors and AM are not JVMs"
NOT_SUPPORTED: dict[str, str] = {
    "tony.task.am.jvm.opts": _NOT_NEEDED,
    "tony.task.executor.jvm.opts": _NOT_NEEDED,
    "tony.task.default.jvm.opts": _NOT_NEEDED,
    "tony.application.num-client-rm-connect-retries": "the client uses the cluster's own YARN client retry settings",
    "tony.task.executor.execution.error-message-max-depth": "the root cause carries the stderr tail and the error file",
    "tony.python-exec-path": "--python_binary_path decides the interpreter",
    "tony.version-info": "set by TonY's own build",
}
NOT_YET: tuple[str, ...] = (
    "tony.application.enable-preprocess", "tony.application.hadoop.location", "tony.application.hadoop.classpath",
    "tony.am.node-label", "tony.am.resources", "tony.gpu-exec-path",
    "tony.history.mover-interval-ms", "tony.history.purger-interval-ms", "tony.history.finished-dir-timezone",
    "tony.portal.cache.max-entries", "tony.https.", "tony.http.", "tony.secret.",
)
PER_TYPE_NOT_YET = frozenset("depends-on".split())
_PER_TYPE_KEY = re.compile(r"^tony\.([a-z]+)\.([a-z.-]+)$")


def _not_supported(key: str) -> str | None:
    for prefix, reason in NOT_SUPPORTED.items():
        if key == prefix or key.startswith(prefix + "."):
            return f"a TonY setting with no effect in TonY-py ({reason})"
    if any(key == k or (k.endswith(".") and key.startswith(k)) for k in NOT_YET):
        return "a TonY setting TonY-py does not support yet; it has no effect"
    m = _PER_TYPE_KEY.match(key)
    if m and m.group(2) in PER_TYPE_NOT_YET:
        return "a TonY setting TonY-py does not support yet; it has no effect"
    return None


def review(conf: TonyConf, type_names: list[str]) -> list[str]:
    """One warning line per `tony.*` key the user set that TonY-py will not act on."""
    per_type = {f"tony.{t}.{s}" for t in type_names for s in PER_TYPE}
    candidates = sorted(SUPPORTED | per_type)
    warnings = []
    for key in conf.keys():
        origin = conf.origin(key)
        if not key.startswith("tony.") or origin == "defaults" or key in SUPPORTED or key in per_type \
                or any(p.match(key) for p in SUPPORTED_PATTERNS):
            continue
        where = f" (set in {origin})"
        reason = _not_supported(key)
        if reason:
            warnings.append(f"{key}{where}: {reason}")
            continue
        m = _PER_TYPE_KEY.match(key)
        close = difflib.get_close_matches(key, candidates, n=1, cutoff=0.85)
        if m and m.group(2) in PER_TYPE:
            if close:  # a setting for a job type that does not exist, named like one that does
                warnings.append(f"{key}{where}: the job has no type {m.group(1)!r}; did you mean {close[0]}?")
            continue  # settings for a type without instances are TonY's normal, silent case
        warnings.append(f"{key}{where}: unknown key, ignored" + (f"; did you mean {close[0]}?" if close else ""))
    return warnings
