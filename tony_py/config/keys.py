"""Which `tony.*` keys TonY-py reads, which TonY keys it does not, and warnings for the rest.

A key TonY-py does not act on must never be silently ignored: a TonY key it does not support
gets one warning line saying so (and why), and an unknown key that looks like a typo of a known
one gets a "did you mean". Keys from the built-in defaults are never warned about.
"""

from __future__ import annotations

import difflib
import re

from tony_py.config.layers import TonyConf

SUPPORTED = frozenset("""
tony.application.name tony.application.type tony.application.tags tony.application.framework
tony.application.timeout tony.application.distributed-mode tony.application.untracked.jobtypes
tony.application.sidecar.jobtypes tony.application.stop-on-failure-jobtypes
tony.application.fail-on-worker-failure-enabled tony.application.security.enabled
tony.application.node-label tony.application.retryable-exit-codes tony.application.retry-on-signal
tony.application.retry-on-infrastructure-failure tony.application.after-chief-timeout-ms
tony.application.max-infrastructure-restarts
tony.application.id
tony.yarn.queue
tony.am.memory tony.am.vcores tony.am.gpus tony.am.retry-count tony.am.wait-client-signal-stop-timeout-sec
tony.am.max-attempts tony.am.python tony.am.class-data-sharing
tony.task.heartbeat-interval-ms tony.task.max-missed-heartbeats tony.task.metrics-interval-ms
tony.task.executor.execution-timeout-ms tony.task.executor.registry-timeout-sec tony.task.max-total-instances
tony.task.max-total-gpus tony.task.progress-timeout-ms tony.task.max-failures-per-node
tony.task.executor.am-lost-timeout-sec tony.task.executor.lease-sec
tony.application.view-acls tony.application.diagnostics.include-logs
tony.container.allocation.timeout tony.container.registration.timeout
tony.containers.command tony.containers.envs tony.containers.resources tony.execution.envs
tony.executor.python tony.staging.cache-visibility
tony.application.priority tony.am.startup-timeout tony.application.prepare-stage tony.application.training-stage
tony.application.tensorboard-log-dir tony.horovod.mode.test tony.horovod.mode.test.fast.fail
tony.horovod.driver.mode.debug tony.application.placement-spec tony.containers.placement-spec
tony.containers.allocation-tags tony.docker.enabled tony.docker.containers.image tony.docker.containers.mount
tony.other.namenodes tony.task.gpu-metrics.enabled tony.gpu.assignment tony.am.command
tony.application.hdfs-conf-path tony.application.yarn-conf-path tony.application.mapred-conf-path
tony.history.location tony.history.intermediate tony.history.finished tony.history.retention-sec tony.portal.url
tony.keytab.user tony.keytab.location
""".split())
# Families of keys with a name inside them.
SUPPORTED_PATTERNS = (
    re.compile(r"^tony\.application\.group\.[A-Za-z]+$"),
    re.compile(r"^tony\.application\.dependency\.[A-Za-z]+\.timeout\.after\.[A-Za-z]+(\.ignored)?$"),
    re.compile(r"^tony\.docker\.[a-z]+\.image$"),
)

# tony.<type>.<suffix> keys read for every job type.
PER_TYPE = frozenset("instances memory vcores gpus node-label command resources max-instances placement-spec "
                     "allocation-tags min-instances nproc-per-node".split())

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
