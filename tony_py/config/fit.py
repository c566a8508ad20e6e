"""Does the job fit the cluster? Checked by the client before anything is created."""

from __future__ import annotations

from tony_py.config.spec import JobSpec, Resources
from tony_py.errors import ConfigError, UsageError

GPU_RESOURCE = "yarn.io/gpu"


def check_fits(spec: JobSpec, cluster: dict) -> None:
    """Reject a container that no running node can hold (TonY waits forever instead), and a
    node label that no running node carries (YARN would accept the application and never run it).

    `cluster` is {"resource_types": [...], "nodes": [{"id", "labels", "capability": {memory-mb,
    vcores, yarn.io/gpu}}]}, as the client bridge reports it. A request without a label can only
    use nodes without one (YARN's default partition); a labelled one only nodes with its label.
    """
    nodes = cluster.get("nodes") or []
    if not nodes:
        raise UsageError("the cluster has no RUNNING NodeManager; nothing could run")
    wants = [("tony.am", spec.am, spec.node_label, "tony.application.node-label")] + [
        (f"tony.{t.name}", t.resources, t.node_label or spec.node_label,
         f"tony.{t.name}.node-label" if t.node_label else "tony.application.node-label")
        for t in spec.types
    ]
    if any(res.gpus for _, res, _, _ in wants) and GPU_RESOURCE not in cluster.get("resource_types", []):
        key = next(f"{p}.gpus" for p, res, _, _ in wants if res.gpus)
        raise ConfigError(key, f"GPUs requested, but the cluster does not schedule {GPU_RESOURCE}")
    labels = sorted({label for n in nodes for label in (n.get("labels") or [])})
    for prefix, res, label, label_key in wants:
        eligible = [n for n in nodes if (label in (n.get("labels") or [])) if label] if label else \
            [n for n in nodes if not n.get("labels")]
        if label and not eligible:
            raise ConfigError(label_key, f"no running node carries the label {label!r} (labels on running nodes: "
                                         f"{', '.join(labels) if labels else 'none'})")
        if not eligible:
            raise UsageError(f"every running node has a node label; set tony.application.node-label to one of "
                             f"{', '.join(labels)}")
        if any(_node_holds(n["capability"], res) for n in eligible):
            continue
        where = f" with label {label!r}" if label else (" without a label" if labels else "")
        for attr, cap_key, unit in (("gpus", GPU_RESOURCE, "GPUs"), ("memory_mb", "memory-mb", "MB"), ("vcores", "vcores", "vcores")):
            most = max(n["capability"].get(cap_key, 0) for n in eligible)
            if getattr(res, attr) > most:
                key = {"memory_mb": "memory"}.get(attr, attr)
                raise ConfigError(
                    f"{prefix}.{key}",
                    f"asks for {getattr(res, attr)} {unit} per container but the largest node{where} has {most} "
                    f"({len(eligible)} node(s) running)",
                )
        cap = max(eligible, key=lambda n: (n["capability"].get(GPU_RESOURCE, 0), n["capability"].get("memory-mb", 0)))["capability"]
        raise ConfigError(
            f"{prefix}.memory",
            f"no single node{where} can hold {res.describe()} (largest: {cap.get('memory-mb')} MB, "
            f"{cap.get('vcores')} vcores, {cap.get(GPU_RESOURCE, 0)} GPUs)",
        )


def _node_holds(cap: dict, res: Resources) -> bool:
    return (
        cap.get("memory-mb", 0) >= res.memory_mb
        and cap.get("vcores", 0) >= res.vcores
        and cap.get(GPU_RESOURCE, 0) >= res.gpus
    )
