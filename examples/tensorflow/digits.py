"""Shared by the TensorFlow examples: scikit-learn's bundled digits (no download) or their
Parquet copy (--data; examples/digits_parquet.py), a small MLP kept as plain tf.Variables, so it
works under any tf.distribute strategy, and its checkpoints: TensorFlow cannot write hdfs://, so
every checkpoint is written locally and committed (tony_py.checkpoint: atomic, fenced by the
restart attempt), and restored from a local copy of the latest."""

import os
import tempfile

import numpy as np
import tensorflow as tf
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from tony_py import checkpoint, data


def load(parquet=None):
    """(x_train, x_test, y_train, y_test): 8x8 digits scaled to [0, 1], a fixed 75/25 split; from
    `parquet` (<parquet>/train and <parquet>/test, each read whole) when given."""
    if parquet:
        train, test = (data.shard(f"{parquet}/{split}", rank=0, world_size=1).read() for split in ("train", "test"))
        return train["x"], test["x"], train["y"], test["y"]
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype("float32")
    return train_test_split(x, y.astype("int64"), test_size=0.25, random_state=0, stratify=y)


class MLP:
    """64 -> 128 -> 10. Variables average their updates across replicas (MEAN aggregation),
    so a plain `assign_sub` in replica context is a synchronous SGD step."""

    def __init__(self, hidden=128, seed=0):
        init = tf.keras.initializers.GlorotUniform(seed=seed)
        agg = tf.VariableAggregation.MEAN
        self.w1 = tf.Variable(init((64, hidden)), name="w1", aggregation=agg)
        self.b1 = tf.Variable(tf.zeros([hidden]), name="b1", aggregation=agg)
        self.w2 = tf.Variable(init((hidden, 10)), name="w2", aggregation=agg)
        self.b2 = tf.Variable(tf.zeros([10]), name="b2", aggregation=agg)
        self.params = [self.w1, self.b1, self.w2, self.b2]

    def __call__(self, x):
        return tf.matmul(tf.nn.relu(tf.matmul(x, self.w1) + self.b1), self.w2) + self.b2

    def sgd_step(self, x, y, learning_rate):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=self(x)))
        for var, grad in zip(self.params, tape.gradient(loss, self.params)):
            var.assign_sub(learning_rate * grad)
        return loss

    def accuracy(self, x, y):
        return float(np.mean(np.argmax(self(x).numpy(), axis=1) == y))

    def checkpoint(self, **extra):
        return tf.train.Checkpoint(w1=self.w1, b1=self.b1, w2=self.w2, b2=self.b2, **extra)


def save(model, directory, step, commit=True):
    """Write the model's checkpoint locally and, if `commit`, commit it to `directory` (a local
    path or an hdfs:// URL) as `step`'s; the committed URL, or None."""
    with tempfile.TemporaryDirectory(prefix="digits-ckpt-") as local:
        model.checkpoint().write(os.path.join(local, "digits"))
        return checkpoint.commit(local, directory, step) if commit else None


def restore(model, directory):
    """Restore the model from the latest checkpoint under `directory`; its step (0: none)."""
    found = checkpoint.latest(directory)
    if not found:
        return 0
    with tempfile.TemporaryDirectory(prefix="digits-restore-") as local:
        model.checkpoint().read(os.path.join(checkpoint.fetch(found, local), "digits")).assert_consumed()
    print(f"resumed from checkpoint: step {found.step} ({found.url})", flush=True)
    return found.step
