"""Data-parallel JAX on scikit-learn's bundled digits (no download), or with --data on a Parquet
copy of them (examples/digits_parquet.py puts one on HDFS), each process reading its own shard as
numpy batches (tony_py.data): a softmax classifier whose batch is split across every process's
devices, one process per TonY-py task.

TonY-py sets JAX_COORDINATOR_ADDRESS (which JAX reads itself), JAX_NUM_PROCESSES and
JAX_PROCESS_ID (tony.application.framework=jax). Each process feeds its own slice of the global
batch; the jitted step's mean over the global batch makes XLA all-reduce the gradients (gloo on
CPU, NCCL on GPUs). After every epoch process 0 saves the parameters locally (np.savez; Orbax's
save works the same way) and commits them to --checkpoint_dir, a local path or an hdfs:// URL
(tony_py.checkpoint: atomic, fenced by the restart attempt). On start process 0 fetches the
latest and every process takes its parameters from process 0, so a restarted job continues
where it stopped, on any host when the checkpoints are on HDFS.
"""

import argparse
import os
import socket
import sys
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

from tony_py import checkpoint, data

CHECKPOINT_FILE = "digits-jax.npz"


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch_size", type=int, default=64, help="per process")
    p.add_argument("--learning_rate", type=float, default=0.5)
    p.add_argument("--data", help="the digits as Parquet (<data>/train, <data>/test), e.g. hdfs:///user/me/digits; "
                                   "default: scikit-learn's bundled copy")
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"),
                   help="a local directory or an hdfs:// URL")
    p.add_argument("--min_accuracy", type=float, default=0.90)
    p.add_argument("--require_gpu", action="store_true", help="fail unless JAX runs on a GPU (GPU checks)")
    return p.parse_args()


def loss_fn(params, x, y):
    logits = x @ params["w"] + params["b"]
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))


def main():
    args = parse_args()
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU all-reduce across processes
    jax.distributed.initialize(num_processes=int(os.environ["JAX_NUM_PROCESSES"]),
                               process_id=int(os.environ["JAX_PROCESS_ID"]))
    me, count = jax.process_index(), jax.process_count()
    print(f"process {me} of {count} on {socket.gethostname()}: {jax.local_device_count()} local "
          f"{jax.default_backend()} device(s), {jax.device_count()} in all; "
          f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}", flush=True)
    if args.require_gpu and jax.default_backend() != "gpu":
        print(f"--require_gpu: JAX runs on {jax.default_backend()}", file=sys.stderr)
        sys.exit(3)

    mesh = Mesh(np.array(jax.devices()), ("data",))
    by_row = NamedSharding(mesh, PartitionSpec("data"))
    replicated = NamedSharding(mesh, PartitionSpec())

    epoch_batches, steps, x_test, y_test = digits(args, me, count)
    params, start = restore(args.checkpoint_dir, me)
    params = jax.device_put(params, replicated)

    @jax.jit
    def step(params, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        return jax.tree_util.tree_map(lambda p, g: p - args.learning_rate * g, params, grads), loss

    saved = None
    for epoch in range(start, args.epochs):
        for xs, ys in epoch_batches(epoch):
            xb = jax.make_array_from_process_local_data(by_row, xs)
            yb = jax.make_array_from_process_local_data(by_row, ys)
            params, loss = step(params, xb, yb)
        print(f"epoch {epoch} loss {float(loss):.4f}", flush=True)
        host = jax.tree_util.tree_map(np.asarray, params)  # replicated: every process holds all of it
        if me == 0:
            saved = save(host, epoch, (epoch + 1) * steps, args.checkpoint_dir) or saved

    host = jax.tree_util.tree_map(np.asarray, params)
    accuracy = float(((x_test @ host["w"] + host["b"]).argmax(axis=1) == y_test).mean())
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    if me == 0:
        print(f"checkpoint written: {saved}", flush=True)
    jax.distributed.shutdown()
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


def digits(args, me, count):
    """(epoch -> this process's (x, y) batches, batches per epoch, x_test, y_test): from --data,
    this process's shard of <data>/train (tony_py.data: as many rows on every process) and all of
    <data>/test; else every count-th row of the bundled digits' training split."""
    if args.data:
        part = data.shard(f"{args.data}/train")  # rank and world size from JAX_PROCESS_ID, JAX_NUM_PROCESSES
        print(f"process {me}: {part.rows} rows of {args.data}/train in {len(part.pieces)} row groups", flush=True)
        test = data.shard(f"{args.data}/test", rank=0, world_size=1).read()

        def from_parquet(epoch):
            for b in part.batches(args.batch_size, epoch=epoch, shuffle=True, drop_last=True):
                yield b["x"], b["y"].astype(np.int32)
        return from_parquet, part.steps(args.batch_size, drop_last=True), test["x"], test["y"]
    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    mine = np.arange(len(x_train)) % count == me  # this process's share of the rows
    x_mine, y_mine = x_train[mine].astype(np.float32), y_train[mine].astype(np.int32)
    steps = len(x_mine) // args.batch_size  # the same on every process (shares differ by one row at most)

    def bundled(epoch):
        order = np.random.default_rng([me, epoch]).permutation(len(x_mine))
        for n in range(steps):
            rows = order[n * args.batch_size:(n + 1) * args.batch_size]
            yield x_mine[rows], y_mine[rows]
    return bundled, steps, x_test, y_test


def restore(directory, me):
    """(parameters, first epoch): process 0 fetches the latest checkpoint, every process gets
    what process 0 has (zeros and epoch 0 when there is none)."""
    params, start = {"w": np.zeros((64, 10), np.float32), "b": np.zeros(10, np.float32)}, 0
    found = checkpoint.latest(directory) if me == 0 else None
    if found:
        with tempfile.TemporaryDirectory() as local:
            saved = np.load(os.path.join(checkpoint.fetch(found, local), CHECKPOINT_FILE))
            params, start = {"w": saved["w"], "b": saved["b"]}, int(saved["epoch"]) + 1
        print(f"resumed from checkpoint: epoch {start} ({found.url})", flush=True)
    params, start = multihost_utils.broadcast_one_to_all((params, np.int32(start)))
    return params, int(start)


def save(host, epoch, step, directory):
    """Save locally, then commit to `directory` (a local path or an hdfs:// URL); the URL."""
    with tempfile.TemporaryDirectory() as local:
        np.savez(os.path.join(local, CHECKPOINT_FILE), w=host["w"], b=host["b"], epoch=epoch)
        return checkpoint.commit(local, directory, step)


if __name__ == "__main__":
    main()
