"""TensorFlow: TonY's CLUSTER_SPEC and the TF_CONFIG that tf.distribute reads."""

from __future__ import annotations

from tony_py.frameworks.envplan import EnvPlan, compact, ref

EVALUATOR = "evaluator"


def tf_view(spec, cluster, on_evaluator: bool) -> dict:
    """TF_CONFIG's cluster: without sidecars (tensorboard) and without the evaluator, except on
    the evaluator itself: an evaluator in the cluster makes MultiWorkerMirroredStrategy wait for it."""
    return {
        name: addrs
        for name, addrs in cluster.items()
        if name not in spec.sidecar and (name != EVALUATOR or on_evaluator)
    }


def plan(spec, cluster, callbacks=None) -> EnvPlan:
    if spec.distributed_mode != "GANG":
        # TonY sets the cluster variables in GANG mode only: in FCFS tasks start before
        # the cluster is complete, so no full spec exists.
        return EnvPlan(lambda task: {})
    shared = {"cluster": cluster}
    names = {}
    for on_evaluator in (False, True):
        view = tf_view(spec, cluster, on_evaluator)
        name = next((n for n, v in shared.items() if v == view), None)
        if name is None:
            name = "tf_evaluator" if on_evaluator else "tf"
            shared[name] = view
        names[on_evaluator] = name

    def env(task) -> dict[str, str]:
        # exactly json.dumps(TF_CONFIG, separators=(",", ":")) once expanded
        task_part = compact({"type": task.type, "index": task.index})
        return {"CLUSTER_SPEC": ref("cluster"),
                "TF_CONFIG": '{"cluster":' + ref(names[task.type == EVALUATOR]) + ',"task":' + task_part + "}"}

    return EnvPlan(env, shared)
