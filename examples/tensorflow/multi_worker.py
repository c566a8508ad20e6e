"""TensorFlow MultiWorkerMirroredStrategy: synchronous data-parallel training on every worker.

Runs as each `worker` task; TF_CONFIG (set by TonY-py) tells TensorFlow the cluster and this
task's place in it. worker:0 is the chief and keeps the checkpoint.
"""

import argparse
import json
import os
import sys
import tempfile

import tensorflow as tf

import digits


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch_size", type=int, default=32, help="per worker")
    p.add_argument("--learning_rate", type=float, default=0.3)
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"))
    p.add_argument("--min_accuracy", type=float, default=0.90)
    args = p.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    is_chief = task["index"] == 0
    workers = strategy.num_replicas_in_sync
    print(f"{task['type']}:{task['index']}: one of {workers} workers", flush=True)

    x_train, x_test, y_train, y_test = digits.load()
    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=0)
    dataset = dataset.repeat().batch(args.batch_size * workers)  # global batch, sharded by TF
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    iterator = iter(strategy.experimental_distribute_dataset(dataset.with_options(options)))

    with strategy.scope():
        model = digits.MLP()

    @tf.function
    def train_step():
        x, y = next(iterator)
        losses = strategy.run(model.sgd_step, args=(x, y, args.learning_rate))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    for step in range(1, args.steps + 1):
        loss = train_step()
        if step % 200 == 0:
            print(f"step {step}: loss {float(loss):.4f}", flush=True)

    accuracy = model.accuracy(x_test, y_test)
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    # Every worker takes part in saving; only the chief's copy is kept (TF's multi-worker rule).
    target = args.checkpoint_dir if is_chief else tempfile.mkdtemp(prefix="ckpt-worker-")
    os.makedirs(target, exist_ok=True)
    path = model.checkpoint().write(os.path.join(target, "digits"))
    if is_chief:
        print(f"checkpoint written: {path}", flush=True)
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


if __name__ == "__main__":
    main()
