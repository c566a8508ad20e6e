"""TensorFlow MultiWorkerMirroredStrategy: synchronous data-parallel training on every worker.

Runs as each `worker` task; TF_CONFIG (set by TonY-py) tells TensorFlow the cluster and this
task's place in it. With --data each worker reads its own shard of a Parquet copy of the digits
(tony_py.data; examples/digits_parquet.py puts one on HDFS), else TensorFlow shards the bundled
digits. Every --checkpoint_every steps all workers write a checkpoint (TF's multi-worker rule)
and worker:0, the chief, commits its copy to --checkpoint_dir, a local path or an hdfs:// URL;
on start every worker restores the latest, so a restarted job continues where it stopped.
"""

import argparse
import json
import os
import sys

import tensorflow as tf

import digits
from tony_py import data


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=800)
    p.add_argument("--batch_size", type=int, default=32, help="per worker")
    p.add_argument("--learning_rate", type=float, default=0.3)
    p.add_argument("--data", help="the digits as Parquet (<data>/train, <data>/test), e.g. hdfs:///user/me/digits; "
                                   "default: scikit-learn's bundled copy")
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"),
                   help="a local directory or an hdfs:// URL")
    p.add_argument("--checkpoint_every", type=int, default=200, help="steps")
    p.add_argument("--min_accuracy", type=float, default=0.90)
    args = p.parse_args()

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    task = json.loads(os.environ["TF_CONFIG"])["task"]
    is_chief = task["index"] == 0
    workers = strategy.num_replicas_in_sync
    print(f"{task['type']}:{task['index']}: one of {workers} workers", flush=True)

    if args.data:  # this worker's shard, per-worker batches: TF shards nothing further
        part = data.shard(f"{args.data}/train")  # rank and world size from TF_CONFIG
        print(f"worker {task['index']}: {part.rows} rows of {args.data}/train in {len(part.pieces)} row groups",
              flush=True)
        _, x_test, _, y_test = digits.load(args.data)
        iterator = iter(strategy.distribute_datasets_from_function(
            lambda _context: part.tf_dataset(args.batch_size, shuffle=True).map(lambda b: (b["x"], b["y"])).repeat()))
    else:
        x_train, x_test, y_train, y_test = digits.load()
        dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train)).shuffle(len(x_train), seed=0)
        dataset = dataset.repeat().batch(args.batch_size * workers)  # global batch, sharded by TF
        options = tf.data.Options()
        options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
        iterator = iter(strategy.experimental_distribute_dataset(dataset.with_options(options)))

    with strategy.scope():
        model = digits.MLP()
    start = digits.restore(model, args.checkpoint_dir)

    @tf.function
    def train_step():
        x, y = next(iterator)
        losses = strategy.run(model.sgd_step, args=(x, y, args.learning_rate))
        return strategy.reduce(tf.distribute.ReduceOp.MEAN, losses, axis=None)

    saved = None
    for step in range(start + 1, args.steps + 1):
        loss = train_step()
        if step % 200 == 0:
            print(f"step {step}: loss {float(loss):.4f}", flush=True)
        if step % args.checkpoint_every == 0 or step == args.steps:
            saved = digits.save(model, args.checkpoint_dir, step, commit=is_chief) or saved

    accuracy = model.accuracy(x_test, y_test)
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    if is_chief:
        print(f"checkpoint written: {saved}", flush=True)
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


if __name__ == "__main__":
    main()
