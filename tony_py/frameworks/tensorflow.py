"""TensorFlow: TonY's CLUSTER_SPEC and the TF_CONFIG that tf.distribute reads."""

from __future__ import annotations

import json

EVALUATOR = "evaluator"


def tf_config(spec, cluster, task) -> dict:
    """TF_CONFIG without sidecars (tensorboard) and without the evaluator, except on the
    evaluator itself: an evaluator in the cluster makes MultiWorkerMirroredStrategy wait for it."""
    view = {
        name: addrs
        for name, addrs in cluster.items()
        if name not in spec.sidecar and (name != EVALUATOR or task.type == EVALUATOR)
    }
    return {"cluster": view, "task": {"type": task.type, "index": task.index}}


def task_env(spec, cluster, task, callbacks=None) -> dict[str, str]:
    if spec.distributed_mode != "GANG":
        # TonY sets the cluster variables in GANG mode only: in FCFS tasks start before
        # the cluster is complete, so no full spec exists.
        return {}
    return {
        "CLUSTER_SPEC": json.dumps(cluster, separators=(",", ":")),
        "TF_CONFIG": json.dumps(tf_config(spec, cluster, task), separators=(",", ":")),
    }
