"""Restarts and their causes: a node where failures keep happening, retries spent on failures
that might pass, preemptions the task did not checkpoint for, timeouts far from what the job used."""

from __future__ import annotations

import math
from collections import Counter

from tony_py.advice import thresholds as th
from tony_py.advice.model import Finding, JobFacts, Suggestion
from tony_py.job.yarn_exits import PREEMPTED_EXITS

USERS_OWN = ("exit_code", "preempted")  # kinds that say nothing about the node (am/policy.counts_against_node)
MIGHT_PASS = ("signal", "lost", "launch", "infrastructure")  # retryable kinds a second run may not meet


def failures(facts: JobFacts) -> list[Finding]:
    return [*_flapping_node(facts), *_retries_spent(facts), *_preempted_unprepared(facts), *_timeout_slack(facts)]


def _flapping_node(facts: JobFacts) -> list[Finding]:
    on = Counter(f["host"] for f in facts.failures if f.get("host") and f.get("kind") not in USERS_OWN)
    if not on:
        return []
    host, count = on.most_common(1)[0]
    limit = facts.spec.max_failures_per_node
    if count < th.FLAPPING_NODE_FAILURES.value or (0 < limit <= count):
        return []
    kinds = Counter(f["kind"] for f in facts.failures if f.get("host") == host and f.get("kind") not in USERS_OWN)
    return [Finding("failures", "moderate", None,
                    f"{count} of the job's failures were on {host} ({', '.join(f'{n} {k}' for k, n in kinds.items())}), "
                    f"and tony.task.max-failures-per-node={limit} kept it in the job",
                    Suggestion("tony.task.max-failures-per-node", str(int(th.FLAPPING_NODE_FAILURES.value))))]


def _retries_spent(facts: JobFacts) -> list[Finding]:
    spec = facts.spec
    if facts.status != "FAILED" or not spec.am_retry_count or facts.restarts_used < spec.am_retry_count:
        return []
    kinds = Counter(f.get("kind") for f in facts.failures)
    if not kinds or any(k not in MIGHT_PASS for k in kinds):
        return []  # an exit code of the user's own comes back on every run: more retries would not help
    return [Finding("failures", "severe", None,
                    f"the job failed after spending all {spec.am_retry_count} restart(s) of tony.am.retry-count on "
                    f"failures a second run may not meet ({', '.join(f'{n} {k}' for k, n in kinds.items())})",
                    Suggestion("tony.am.retry-count", str(spec.am_retry_count + 2)))]


def _preempted_unprepared(facts: JobFacts) -> list[Finding]:
    """Warned of a preemption, still running at YARN's kill: nothing checkpointed on SIGTERM."""
    warned = {e.get("task") for e in facts.events if e.get("kind") == "PREEMPTION"}
    killed = sorted({f["task"] for f in facts.failures if f.get("task") in warned and f.get("exit_code") in PREEMPTED_EXITS})
    if not killed:
        return []
    return [Finding("failures", "moderate", killed[0].split(":")[0],
                    f"{', '.join(killed)} got YARN's preemption warning (SIGTERM) and ran until its kill: the work "
                    "since its last checkpoint was lost",
                    Suggestion("SIGTERM", "checkpoint and exit on SIGTERM, before the time in "
                               "$TONY_PREEMPTION_DEADLINE_FILE (tony_py.task.preemption_deadline())", kind="code"))]


def _timeout_slack(facts: JobFacts) -> list[Finding]:
    timeout_s, took = facts.spec.timeout_ms / 1000, facts.total_s
    if facts.status != "SUCCEEDED" or timeout_s <= 0 or not took:
        return []
    if timeout_s <= th.TIMEOUT_SLACK.value * took:
        return []
    minutes = max(1, math.ceil(th.TIMEOUT_SUGGESTED_FACTOR.value * took / 60))
    return [Finding("failures", "low", None,
                    f"tony.application.timeout is {timeout_s:.0f} s and the job took {took:.0f} s: a hang would "
                    f"hold the cluster {timeout_s / took:.0f}x the job's time before it is stopped",
                    Suggestion("tony.application.timeout", str(minutes * 60_000)))]
