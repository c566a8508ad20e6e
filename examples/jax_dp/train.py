"""Data-parallel JAX on scikit-learn's bundled digits (no download): a softmax classifier whose
batch is split across every process's devices, one process per TonY-py task.

TonY-py sets JAX_COORDINATOR_ADDRESS (which JAX reads itself), JAX_NUM_PROCESSES and
JAX_PROCESS_ID (tony.application.framework=jax). Each process feeds its own slice of the global
batch; the jitted step's mean over the global batch makes XLA all-reduce the gradients (gloo on
CPU, NCCL on GPUs). Process 0 writes a checkpoint after every epoch; every process resumes from
it if it exists, so a restarted job continues where it stopped.
"""

import argparse
import os
import socket
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--batch_size", type=int, default=64, help="per process")
    p.add_argument("--learning_rate", type=float, default=0.5)
    p.add_argument("--checkpoint_dir", default=os.environ.get("CHECKPOINT_DIR", "checkpoints"))
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

    x, y = load_digits(return_X_y=True)
    x_train, x_test, y_train, y_test = train_test_split(x / 16.0, y, test_size=0.25, random_state=0, stratify=y)
    mine = np.arange(len(x_train)) % count == me  # this process's share of the rows
    x_mine, y_mine = x_train[mine].astype(np.float32), y_train[mine].astype(np.int32)

    ckpt = os.path.join(args.checkpoint_dir, "digits-jax.npz")
    params, start = {"w": np.zeros((64, 10), np.float32), "b": np.zeros(10, np.float32)}, 0
    if os.path.exists(ckpt):
        saved = np.load(ckpt)
        params, start = {"w": saved["w"], "b": saved["b"]}, int(saved["epoch"]) + 1
        print(f"resumed from checkpoint: epoch {start}", flush=True)
    params = jax.device_put(params, replicated)

    @jax.jit
    def step(params, xb, yb):
        loss, grads = jax.value_and_grad(loss_fn)(params, xb, yb)
        return jax.tree_util.tree_map(lambda p, g: p - args.learning_rate * g, params, grads), loss

    steps = len(x_mine) // args.batch_size  # the same on every process (shares differ by one row at most)
    rng = np.random.default_rng(me)
    for epoch in range(start, args.epochs):
        order = rng.permutation(len(x_mine))
        for n in range(steps):
            rows = order[n * args.batch_size:(n + 1) * args.batch_size]
            xb = jax.make_array_from_process_local_data(by_row, x_mine[rows])
            yb = jax.make_array_from_process_local_data(by_row, y_mine[rows])
            params, loss = step(params, xb, yb)
        print(f"epoch {epoch} loss {float(loss):.4f}", flush=True)
        host = jax.tree_util.tree_map(np.asarray, params)  # replicated: every process holds all of it
        if me == 0:
            os.makedirs(args.checkpoint_dir, exist_ok=True)
            tmp = ckpt + ".tmp.npz"
            np.savez(tmp, w=host["w"], b=host["b"], epoch=epoch)
            os.replace(tmp, ckpt)

    host = jax.tree_util.tree_map(np.asarray, params)
    accuracy = float(((x_test @ host["w"] + host["b"]).argmax(axis=1) == y_test).mean())
    print(f"test accuracy: {accuracy:.4f}", flush=True)
    jax.distributed.shutdown()
    if accuracy < args.min_accuracy:
        print(f"accuracy {accuracy:.4f} is below {args.min_accuracy}", file=sys.stderr)
        sys.exit(4)


if __name__ == "__main__":
    main()
