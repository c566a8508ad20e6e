"""TensorFlow ParameterServerStrategy: chief + workers + ps.

The chief is the coordinator: it owns the training loop and schedules steps on the workers;
the variables live on the ps task. Workers and ps only run a tf.distribute.Server and never
exit by themselves, so parameter_server.xml marks them untracked: the job succeeds when the
chief does, and TonY-py then stops the servers. With --data the chief reads the Parquet copy of
the digits (examples/digits_parquet.py) whole, and every worker's dataset draws from all of it
(as from the bundled copy: a tf.data function sent to a worker cannot read HDFS from Python);
the checkpoint goes to --checkpoint_dir, a local path or an hdfs:// URL, written
locally and committed (tony_py.checkpoint), and a restarted job resumes from it.
"""

import argparse
import os
import sys

import tensorflow as tf

import digits


def serve(resolver):
    server = tf.distribute.Server(
        resolver.cluster_spec(),
        job_name=resolver.task_type,
        task_index=resolver.task_id,
        protocol=resolver.rpc_layer or "grpc",
        start=True,
    )
    print(f"{resolver.task_type}:{resolver.task_id} serving", flush=True)
    server.join()


def coordinate(resolver, args):
    x_train, x_test, y_train, y_test = digits.load(args.data)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = digits.MLP()
    start = digits.restore(model, args.checkpoint_dir)

    def dataset_fn(_context=None):
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train)).repeat()
        return ds.batch(args.batch_size).prefetch(2)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(it):
        x, y = next(it)
        return strategy.run(model.sgd_step, args=(x, y, args.learning_rate))

    for step in range(start + 1, args.steps + 1):
        loss = coordinator.schedule(train_step, args=(iterator,))
        if step % 200 == 0:
            coordinator.join()
            print(f"step {step}: loss {float(loss.fetch()):.4f}", flush=True)
    coordinator.join()

    accuracy = model.accuracy(x_test, y_test)
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    print(f"checkpoint written: {digits.save(model, args.checkpoint_dir, args.steps)}", flush=True)
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.2)
    p.add_argument("--data", help="the digits as Parquet (<data>/train, <data>/test), e.g. hdfs:///user/me/digits; "
                                   "default: scikit-learn's bundled copy")
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"),
                   help="a local directory or an hdfs:// URL")
    p.add_argument("--min_accuracy", type=float, default=0.90)
    args = p.parse_args()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
    else:
        coordinate(resolver, args)


if __name__ == "__main__":
    main()
