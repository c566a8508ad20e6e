"""All heuristics over one job, ranked; the ways to show them; a config with them applied."""

from __future__ import annotations

from tony_py.advice.failures import failures
from tony_py.advice.model import COST_PER_HOUR, SEVERITIES, Finding, JobFacts
from tony_py.advice.resources import gpus, memory, vcores
from tony_py.advice.timing import startup, stragglers, waiting

HEURISTICS = (memory, vcores, gpus, waiting, startup, stragglers, failures)
# The job's own keys --write leaves out: the next submit sets them itself.
NOT_WRITTEN = ("tony.application.id", "tony.history.", "tony.staging.")


def advise(facts: JobFacts) -> list[Finding]:
    """Every finding, most pressing first (severity, then what its waste costs); of two that
    would set one key (a straggler's vcores and the type's), only the more pressing one."""
    found = sorted((f for heuristic in HEURISTICS for f in heuristic(facts)),
                   key=lambda f: (SEVERITIES.index(f.severity), -f.cost))
    keys: set[str] = set()
    out = []
    for f in found:
        if f.suggestion.kind == "conf":
            if f.suggestion.key in keys:
                continue
            keys.add(f.suggestion.key)
        out.append(f)
    return out


def top_line(findings: list[Finding]) -> str | None:
    """The one line the client prints at the end of a job."""
    if not findings:
        return None
    f = findings[0]
    more = f" (and {len(findings) - 1} more: tony advise)" if len(findings) > 1 else " (tony advise)"
    return f"advice: {f.evidence}; {f.suggestion.flag()}{more}"


def text(app_id: str, findings: list[Finding]) -> str:
    if not findings:
        return f"{app_id}: nothing to advise; the job used about what it asked for"
    lines = [f"{app_id}: {len(findings)} finding(s), most pressing first"]
    for n, f in enumerate(findings, 1):
        about = f" {f.task_type}" if f.task_type else ""
        lines.append(f"{n}. [{f.severity}] {f.heuristic}{about}: {f.evidence}")
        lines.append(f"   {f.suggestion.flag()}")
    conf = [f.suggestion for f in findings if f.suggestion.kind == "conf"]
    if conf:
        lines.append("all at once: " + " ".join(s.flag() for s in conf))
    return "\n".join(lines)


def waste(findings: list[Finding]) -> dict[str, float]:
    """What the job asked for and did not use, per unit (GB-hours, vcore-hours, GPU-hours)."""
    out: dict[str, float] = {}
    for f in findings:
        if f.waste_unit:
            out[f.waste_unit] = round(out.get(f.waste_unit, 0.0) + f.waste, 4)
    return out


def waste_cost(waste_by_unit: dict | None) -> float:
    """One number to order jobs by what they wasted (COST_PER_HOUR's weights)."""
    return sum(COST_PER_HOUR.get(unit, 0.0) * amount for unit, amount in (waste_by_unit or {}).items())


def waste_text(waste_by_unit: dict | None) -> str:
    return " · ".join(f"{amount:.2g} {unit}" for unit, amount in sorted((waste_by_unit or {}).items(),
                                                                         key=lambda u: -COST_PER_HOUR.get(u[0], 0)))


def to_json(app_id: str, findings: list[Finding]) -> dict:
    return {"app_id": app_id, "findings": [f.to_dict() for f in findings], "waste": waste(findings)}


def applied(job_conf: dict[str, str], defaults: dict[str, str], findings: list[Finding]) -> dict[str, str]:
    """The job's own configuration (what it set beyond TonY-py's defaults) with every config
    suggestion applied: a tony.xml to submit the next run with (`--conf_file`)."""
    out = {k: v for k, v in job_conf.items()
           if defaults.get(k) != v and not any(k == n or (n.endswith(".") and k.startswith(n)) for n in NOT_WRITTEN)}
    for f in findings:
        if f.suggestion.kind == "conf":
            if f.suggestion.value == "":
                out.pop(f.suggestion.key, None)
            else:
                out[f.suggestion.key] = f.suggestion.value
    return out
