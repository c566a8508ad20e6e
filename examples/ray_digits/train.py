"""A hyperparameter search as Ray remote tasks: every (C, gamma) of an SVM on scikit-learn's
bundled digits is cross-validated in a task of its own, scheduled with Ray's SPREAD strategy
over the cluster's nodes; the best is fitted on the training split and scored on the test split.

Unchanged outside TonY-py: `ray.init()` joins the cluster RAY_ADDRESS names (TonY-py sets it on
the head), or starts a local one.
"""

import argparse
import collections
import os
import socket

import ray


def digits():
    """scikit-learn's bundled digits, split the same way everywhere (each task loads its own:
    it is small, and a task that needs no object from the driver's node runs on any node)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    x, y = load_digits(return_X_y=True)
    return train_test_split(x / 16.0, y, test_size=0.25, random_state=0)


@ray.remote(num_cpus=1)
def cross_validate(c: float, gamma: float) -> dict:
    from sklearn.model_selection import cross_val_score
    from sklearn.svm import SVC

    x_train, _, y_train, _ = digits()
    score = cross_val_score(SVC(C=c, gamma=gamma), x_train, y_train, cv=5).mean()
    # CONTAINER_ID: the YARN container of the Ray node the task ran on
    return {"C": c, "gamma": gamma, "score": float(score),
            "where": os.environ.get("CONTAINER_ID") or socket.gethostname()}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--checkpoint_dir", default="", help="where the best parameters are written")
    args = parser.parse_args()
    from sklearn.svm import SVC

    ray.init()
    print(f"Ray cluster: {len(ray.nodes())} nodes, {ray.cluster_resources().get('CPU', 0):.0f} CPUs", flush=True)
    x_train, x_test, y_train, y_test = digits()
    grid = [(c, g) for c in (0.1, 1.0, 10.0, 100.0) for g in (0.005, 0.02, 0.05, 0.2)]
    trials = ray.get([cross_validate.options(scheduling_strategy="SPREAD").remote(c, g) for c, g in grid])
    for where, count in sorted(collections.Counter(t["where"] for t in trials).items()):
        print(f"{count} trials ran in {where}", flush=True)
    best = max(trials, key=lambda t: t["score"])
    print(f"best: C={best['C']} gamma={best['gamma']} (cross-validated {best['score']:.3f})", flush=True)
    model = SVC(C=best["C"], gamma=best["gamma"]).fit(x_train, y_train)
    print(f"test accuracy: {model.score(x_test, y_test):.4f}", flush=True)
    if args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        with open(os.path.join(args.checkpoint_dir, "best.txt"), "w") as f:
            f.write(f"C={best['C']} gamma={best['gamma']}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
