"""TensorFlow ParameterServerStrategy: chief + workers + ps.

The chief is the coordinator: it owns the training loop and schedules steps on the workers;
the variables live on the ps task. Workers and ps only run a tf.distribute.Server and never
exit by themselves, so parameter_server.xml marks them untracked: the job succeeds when the
chief does, and TonY-py then stops the servers.
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
    x_train, x_test, y_train, y_test = digits.load()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = digits.MLP()

    def dataset_fn(_context=None):
        ds = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train)).repeat()
        return ds.batch(args.batch_size).prefetch(2)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(it):
        x, y = next(it)
        return strategy.run(model.sgd_step, args=(x, y, args.learning_rate))

    for step in range(1, args.steps + 1):
        loss = coordinator.schedule(train_step, args=(iterator,))
        if step % 200 == 0:
            coordinator.join()
            print(f"step {step}: loss {float(loss.fetch()):.4f}", flush=True)
    coordinator.join()

    accuracy = model.accuracy(x_test, y_test)
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    os.makedirs(args.checkpoint_dir, exist_ok=True)
    path = model.checkpoint().write(os.path.join(args.checkpoint_dir, "digits"))
    print(f"checkpoint written: {path}", flush=True)
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--learning_rate", type=float, default=0.2)
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"))
    p.add_argument("--min_accuracy", type=float, default=0.90)
    args = p.parse_args()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        serve(resolver)
    else:
        coordinate(resolver, args)


if __name__ == "__main__":
    main()
