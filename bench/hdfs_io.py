"""HDFS from task code, against the JVM client and the local disk (JSON on stdout).

A TonY-py job's task on the local process cluster (all daemons on this machine) reads a Parquet
dataset of --gib GiB (--files files of random doubles, written here once and put on HDFS with
`hdfs dfs -put`) in --rounds rounds, the readers in a different order each round so the
machine's noise falls on all alike:

  native_bytes     every file's bytes through tony_py.hdfs (hdfs-native), 8 MiB reads
  native_small     the same through 64 KiB reads (what shutil.copyfileobj and io.BufferedReader do)
  jvm_cat          `hdfs dfs -cat` of the same files (Hadoop's FsShell, one JVM for all), its stdout
                   counted; first_byte_s is the JVM's start and first block, steady_mb_s excludes it
  local_bytes      the same bytes from the local disk (the dataset's local copy), 8 MiB reads
  native_parquet   pyarrow.dataset.dataset("hdfs:///...").to_table(): decoded, through hdfs-native
  local_parquet    the same from the local copy

then a --ckpt-gib GiB torch checkpoint (a state dict of float32 tensors): torch.save to hdfs://
and torch.load back (tony_py.hdfs's writer and reader), against the same on the task's local disk,
and the JVM's `hdfs dfs -put` and `-cat` of the same file.

The ratios: native_bytes / jvm_cat (the goal: >= 0.9), on whole runs and on the JVM's steady
state, and native_bytes / local_bytes (what one host allows: the DataNode reads the same disk).

Usage: bench/hdfs_io.py [--gib 1] [--files 8] [--rounds 3] [--ckpt-gib 1] [--workdir .bench-hdfs-io]
Starts the process cluster in --workdir (left up; `tony cluster down --workdir ...` stops it).
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHUNK = 8 << 20
SMALL = 64 << 10
READERS = ("native_bytes", "native_small", "jvm_cat", "local_bytes", "native_parquet", "local_parquet")


# ---- in the task ---------------------------------------------------------------------------------
def read_all(open_file, paths: list[str], size: int) -> int:
    total = 0
    for path in paths:
        with open_file(path) as f:
            while chunk := f.read(size):
                total += len(chunk)
    return total


def jvm_cat(lib: str, paths: list[str]) -> dict:
    """`hdfs dfs -cat` of every path in one JVM; its stdout counted as it comes."""
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    cmd = [java, "-Xmx256m", "-cp", f"{os.environ['HADOOP_CONF_DIR']}:{lib}/*", "org.apache.hadoop.fs.FsShell",
           "-cat", *paths]
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first, total = None, 0
    while chunk := proc.stdout.read1(1 << 20):
        first = first or time.perf_counter()
        total += len(chunk)
    err = proc.stderr.read().decode(errors="replace")
    if proc.wait():
        raise RuntimeError(f"hdfs dfs -cat failed: {err[-2000:]}")
    return {"bytes": total, "s": time.perf_counter() - started, "first_byte_s": first - started}


def one_reader(name: str, args, remote: list[str], local: list[str]) -> dict:
    import fsspec
    import pyarrow.dataset as ds

    started = time.perf_counter()
    if name == "jvm_cat":
        return jvm_cat(args.lib, remote)
    if name == "native_bytes":
        n = read_all(lambda p: fsspec.open("hdfs://" + p, "rb").open(), remote, CHUNK)
    elif name == "native_small":
        n = read_all(lambda p: fsspec.open("hdfs://" + p, "rb").open(), remote, SMALL)
    elif name == "local_bytes":
        n = read_all(lambda p: open(p, "rb", buffering=0), local, CHUNK)
    elif name == "native_parquet":
        n = ds.dataset("hdfs://" + args.remote, format="parquet").to_table().nbytes
    else:
        n = ds.dataset(args.local, format="parquet").to_table().nbytes
    return {"bytes": n, "s": time.perf_counter() - started}


def checkpoint(args) -> dict:
    import fsspec
    import torch

    numel = int(args.ckpt_gib * (1 << 30)) // 4 // 8
    state = {f"layer{i}": torch.rand(numel) for i in range(8)}
    size = sum(t.numel() * 4 for t in state.values())
    local = os.path.abspath("ckpt.pt")
    remote = f"{args.remote_ckpt}/ckpt.pt"
    out = {"bytes": size}

    def timed(name, fn):
        started = time.perf_counter()
        fn()
        out[name] = round(size / 1e6 / (time.perf_counter() - started), 1)

    timed("native_save_mb_s", lambda: torch.save(state, fsspec.open("hdfs://" + remote, "wb").open()))
    timed("native_load_mb_s", lambda: torch.load(fsspec.open("hdfs://" + remote, "rb").open()))
    timed("local_save_mb_s", lambda: torch.save(state, local))
    timed("local_load_mb_s", lambda: torch.load(local))
    loaded = torch.load(fsspec.open("hdfs://" + remote, "rb").open())
    assert all(torch.equal(loaded[k], v) for k, v in state.items()), "the checkpoint read back differs"
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    shell = [java, "-Xmx256m", "-cp", f"{os.environ['HADOOP_CONF_DIR']}:{args.lib}/*", "org.apache.hadoop.fs.FsShell"]
    timed("jvm_put_mb_s", lambda: subprocess.run(shell + ["-put", "-f", local, remote + ".jvm"], check=True))
    timed("jvm_cat_mb_s", lambda: subprocess.run(shell + ["-cat", remote + ".jvm"], check=True,
                                                 stdout=subprocess.DEVNULL))
    os.unlink(local)
    return out


def task(args) -> int:
    import tony_py.hdfs

    fs = tony_py.hdfs.filesystem()
    remote = sorted(p for p in fs.ls(args.remote, detail=False) if p.endswith(".parquet"))
    local = sorted(str(p) for p in Path(args.local).glob("*.parquet"))
    samples: dict[str, list[dict]] = {name: [] for name in READERS}
    for r in range(args.rounds):
        order = READERS[r % len(READERS):] + READERS[:r % len(READERS)]
        for name in order:
            samples[name].append(one_reader(name, args, remote, local))
            print(f"round {r} {name}: {samples[name][-1]}", flush=True)
    result = {"samples": samples, "checkpoint": checkpoint(args) if args.ckpt_gib > 0 else None}
    with open(args.result + ".partial", "w") as f:
        json.dump(result, f)
    os.replace(args.result + ".partial", args.result)
    return 0


# ---- on this machine -----------------------------------------------------------------------------
def make_dataset(where: Path, gib: float, files: int) -> list[Path]:
    """--files Parquet files of 4 columns of random doubles (incompressible: the bytes on disk are
    the bytes read), kept between runs."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = int(gib * (1 << 30)) // 32 // files
    paths = [where / f"part-{i:03d}.parquet" for i in range(files)]
    marker = where / f".made-{gib}-{files}"
    if not marker.exists():
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        rng = np.random.default_rng(42)
        for path in paths:
            pq.write_table(pa.table({c: rng.random(rows) for c in "abcd"}), path, compression="none")
        marker.touch()
    return paths


def fs_shell(conf_dir: str, lib: str, *args: str) -> None:
    subprocess.run(["java", "-Xmx256m", "-cp", f"{conf_dir}:{lib}/*", "org.apache.hadoop.fs.FsShell", *args],
                   check=True, capture_output=True, timeout=1800)


def mb_s(sample: dict, exclude_start: bool = False) -> float:
    seconds = sample["s"] - (sample["first_byte_s"] if exclude_start else 0)
    return round(sample["bytes"] / 1e6 / seconds, 1)


def summary(result: dict, data_bytes: int) -> dict:
    out = {}
    for name, samples in result["samples"].items():
        rates = [mb_s(s) for s in samples]
        out[name] = {"median_mb_s": statistics.median(rates), "samples_mb_s": rates,
                     "bytes": samples[0]["bytes"]}
    jvm = result["samples"]["jvm_cat"]
    out["jvm_cat"]["steady_median_mb_s"] = statistics.median(mb_s(s, True) for s in jvm)
    out["jvm_cat"]["first_byte_s"] = statistics.median(round(s["first_byte_s"], 2) for s in jvm)
    for name in ("native_bytes", "jvm_cat", "local_bytes"):
        assert out[name]["bytes"] == data_bytes, (name, out[name]["bytes"], data_bytes)
    native = out["native_bytes"]["median_mb_s"]
    return {"readers": out, "ratios": {
        "native_vs_jvm_cat": round(native / out["jvm_cat"]["median_mb_s"], 2),
        "native_vs_jvm_cat_steady": round(native / out["jvm_cat"]["steady_median_mb_s"], 2),
        "native_small_vs_jvm_cat_steady": round(out["native_small"]["median_mb_s"]
                                                / out["jvm_cat"]["steady_median_mb_s"], 2),
        "native_vs_local_disk": round(native / out["local_bytes"]["median_mb_s"], 2),
        "native_parquet_vs_local_parquet": round(out["native_parquet"]["median_mb_s"]
                                                 / out["local_parquet"]["median_mb_s"], 2)}}


def run_job(args, state, remote: str, local: Path) -> dict:
    with tempfile.TemporaryDirectory(prefix="tony-bench-hdfs-io-") as tmp:
        src = Path(tmp, "src")
        src.mkdir()
        shutil.copy(__file__, src / "hdfs_io.py")
        result = Path(tmp, "result.json")
        params = (f"--task --lib {state.lib_dir} --remote {remote}/data --local {local} --remote-ckpt {remote}/ckpt "
                  f"--result {result} --rounds {args.rounds} --ckpt-gib {args.ckpt_gib}")
        started = time.monotonic()
        job = subprocess.run([sys.executable, "-m", "tony_py.submit", "--src_dir", str(src), "--executes", "hdfs_io.py",
                              "--python_binary_path", sys.executable, "--task_params", params,
                              "--conf", "tony.worker.instances=1", "--conf", "tony.worker.memory=6g",
                              "--conf", "tony.am.memory=512m"], cwd=ROOT, capture_output=True, text=True,
                             env=dict(os.environ, HADOOP_CONF_DIR=state.conf_dir))
        if job.returncode != 0 or not result.exists():
            raise SystemExit(f"the job failed ({job.returncode}): {(job.stdout + job.stderr)[-3000:]}")
        out = json.loads(result.read_text())
        out["job_s"] = round(time.monotonic() - started, 1)
        return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ckpt-gib", type=float, default=1.0)
    parser.add_argument("--workdir", default=str(ROOT / ".bench-hdfs-io"))
    for task_flag in ("--lib", "--remote", "--local", "--remote-ckpt", "--result"):
        parser.add_argument(task_flag, help=argparse.SUPPRESS)
    parser.add_argument("--task", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.task:
        return task(args)
    sys.path.insert(0, str(ROOT))
    from tony_py.cluster import LocalCluster

    workdir = Path(args.workdir).resolve()
    state, _ = LocalCluster(workdir).up()
    files = make_dataset(workdir / "bench-data", args.gib, args.files)
    data_bytes = sum(p.stat().st_size for p in files)
    remote = f"/user/{getpass.getuser()}/bench-hdfs-io"
    fs_shell(state.conf_dir, state.lib_dir, "-mkdir", "-p", f"{remote}/data", f"{remote}/ckpt")
    started = time.monotonic()
    fs_shell(state.conf_dir, state.lib_dir, "-put", "-f", *map(str, files), f"{remote}/data")
    put_s = time.monotonic() - started
    result = run_job(args, state, remote, workdir / "bench-data")
    print(json.dumps({"benchmark": "hdfs_io", "cpu_count": os.cpu_count(), "load_avg_1m": os.getloadavg()[0],
                      "dataset": {"files": len(files), "bytes": data_bytes, "jvm_put_mb_s": round(
                          data_bytes / 1e6 / put_s, 1)},
                      "rounds": args.rounds, **summary(result, data_bytes), "checkpoint": result["checkpoint"],
                      "job_s": result["job_s"]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
