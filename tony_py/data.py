"""Each task its part of a Parquet dataset, by its rank and the job's world size, for TensorFlow
(a tf.data.Dataset), PyTorch (an IterableDataset) and JAX (numpy batches). The dataset is a
directory (read recursively; names starting with `_` or `.` are skipped, as Spark's `_SUCCESS`)
or a file, on hdfs:// or viewfs:// (through tony_py.hdfs, so the task needs hdfs-native) or any
other fsspec URL, a local path included.

    from tony_py import data
    part = data.shard("hdfs:///user/me/digits/train")     # rank and world size from the task's env
    for batch in part.batches(64, epoch=e, shuffle=True): # JAX: {"x": ndarray, "y": ndarray}
    loader = DataLoader(part.torch_dataset(64), batch_size=None, num_workers=2)  # PyTorch: tensors
    dataset = part.tf_dataset(64).repeat()                # TensorFlow: dicts of tensors

How rows are split (the rules petastorm's cur_shard/shard_count follow):
- the unit is a whole file, or a row group where that gives the task with the fewest rows more
  (fewer files than tasks, files of uneven sizes; by= forces either); units go round-robin by
  rank over the files sorted by path (row groups in file order), so every task computes the
  same split from the same listing;
- equal=True (the default): every task yields the same number of rows, the smallest share's, so
  a synchronous step (DDP, MultiWorkerMirroredStrategy, a jitted collective) never waits on a
  task that ran out of data; the rows past it are dropped, different ones each epoch when
  shuffled (`Shard.dropped` says how many). It needs every file's footer (one small read each);
- fewer row groups than tasks: with equal=True that is an error naming the dataset, its row
  groups and the task count (every task would get nothing); with equal=False the tasks past
  the last row group get an empty shard, for work that can do without (evaluation, PS).

PyTorch's DataLoader workers split a task's rows further: each reads a contiguous run of whole
batches, so the task yields the same batches with any num_workers, forked (the default), spawned or
from a forkserver: the parent's HDFS clients are left alone in a forked worker, which makes its own
(hdfs-native's tokio runtime cannot be used, nor even freed, across a fork).
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, field
from typing import Iterator

BY = ("auto", "file", "row_group")
READ_ROWS = 65536  # rows per read from a file: the unit of the in-block shuffle


def task_rank(env=None) -> tuple[int, int]:
    """(rank, world size) of this task: RANK/WORLD_SIZE (PyTorch, torchrun), JAX_PROCESS_ID/
    JAX_NUM_PROCESSES, TF_CONFIG (chief, master, then worker tasks, as TonY-py numbers ranks),
    TonY's TASK_INDEX/TASK_NUM (rank and world size only in a job of one task type); (0, 1)
    outside a job."""
    env = os.environ if env is None else env
    for rank_key, world_key in (("RANK", "WORLD_SIZE"), ("JAX_PROCESS_ID", "JAX_NUM_PROCESSES")):
        if env.get(rank_key) is not None and env.get(world_key) is not None:
            return _checked(env, rank_key, world_key)
    if env.get("TF_CONFIG"):
        return _tf_config_rank(env["TF_CONFIG"])
    if env.get("TASK_INDEX") is not None and env.get("TASK_NUM") is not None:
        return _checked(env, "TASK_INDEX", "TASK_NUM")
    return 0, 1


def _checked(env, rank_key: str, world_key: str) -> tuple[int, int]:
    try:
        rank, world = int(env[rank_key]), int(env[world_key])
    except ValueError:
        raise ValueError(f"{rank_key}={env[rank_key]!r} and {world_key}={env[world_key]!r}: "
                         "both must be whole numbers") from None
    if not 0 <= rank < world:
        raise ValueError(f"{rank_key}={rank} is not in 0..{world_key}-1 ({world_key}={world})")
    return rank, world


def _tf_config_rank(text: str) -> tuple[int, int]:
    try:
        config = json.loads(text)
        cluster, task = config["cluster"], config["task"]
        kind, index = task["type"], int(task["index"])
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"TF_CONFIG is not {{'cluster': ..., 'task': {{'type', 'index'}}}}: {exc}") from None
    trainers = [t for t in ("chief", "master", "worker") if cluster.get(t)]
    if kind not in trainers:
        raise ValueError(f"TF_CONFIG's task is {kind}:{index}, which trains on no shard (only {', '.join(trainers)} "
                         "tasks do): pass rank= and world_size= to shard()")
    before = sum(len(cluster[t]) for t in trainers[:trainers.index(kind)])
    return before + index, sum(len(cluster[t]) for t in trainers)


# ---- the split (pure) --------------------------------------------------------------------------
@dataclass(frozen=True)
class Piece:
    """One row group of one file."""

    path: str
    row_group: int
    rows: int


def split(files: list[list[Piece]], world: int, by: str = "auto") -> list[list[Piece]]:
    """Each rank's pieces: whole files round-robin (by='file') or row groups round-robin in file
    order (by='row_group'); 'auto' takes whole files unless row groups give the smallest share
    more rows (fewer files than tasks, or files of uneven sizes)."""
    if by not in BY:
        raise ValueError(f"by={by!r}: use one of {', '.join(BY)}")
    by_file = [[p for f in files[rank::world] for p in f] for rank in range(world)]
    pieces = [p for f in files for p in f]
    by_group = [pieces[rank::world] for rank in range(world)]
    if by == "auto":
        return by_group if len(files) < world or _smallest(by_group) > _smallest(by_file) else by_file
    return by_file if by == "file" else by_group


def _smallest(per_rank: list[list[Piece]]) -> int:
    return min(sum(p.rows for p in pieces) for pieces in per_rank)


def share(per_rank: list[list[Piece]], rank: int, equal: bool, what: str) -> int:
    """How many rows `rank` yields: its own, or with equal=True every rank's smallest, which
    must not be 0."""
    rows = [sum(p.rows for p in pieces) for pieces in per_rank]
    if not equal:
        return rows[rank]
    if min(rows) == 0:
        groups = sum(len(pieces) for pieces in per_rank)
        raise ValueError(f"{what}: {groups} row group(s) with rows for {len(per_rank)} tasks, so task(s) "
                         f"{', '.join(str(r) for r, n in enumerate(rows) if n == 0)} would get no rows "
                         "(equal=True gives every task the smallest share): write the data with more, smaller "
                         "row groups (pyarrow.parquet.write_table(row_group_size=...)), run fewer tasks, or pass "
                         "equal=False and let those tasks handle an empty shard")
    return min(rows)


def spans(pieces: list[Piece], start: int, stop: int) -> list[tuple[str, list[int], int, int]]:
    """Rows [start, stop) of the stream of `pieces` as reads: (path, row groups, lo, hi), where
    lo/hi count rows within those row groups taken together; a piece that follows the previous
    one in the same file, read to its end, joins its read (one open per file, not per piece)."""
    out: list[tuple[str, list[int], int, int]] = []
    offset, read_end = 0, 0  # read_end: the rows of out[-1]'s row groups together
    for p in pieces:
        lo, hi = max(start - offset, 0), min(stop - offset, p.rows)
        offset += p.rows
        if lo >= hi:
            continue
        if out and lo == 0 and out[-1][0] == p.path and out[-1][1][-1] + 1 == p.row_group and out[-1][3] == read_end:
            path, groups, first, _ = out[-1]
            out[-1] = (path, groups + [p.row_group], first, read_end + hi)
        else:
            out.append((p.path, [p.row_group], lo, hi))
            read_end = 0
        read_end += p.rows
        if offset >= stop:
            break
    return out


def worker_rows(rows: int, batch_size: int, drop_last: bool, worker: int, workers: int) -> tuple[int, int]:
    """The contiguous rows [start, stop) a DataLoader worker reads: whole batches, split evenly."""
    batches = rows // batch_size if drop_last else -(-rows // batch_size)
    first, last = worker * batches // workers, (worker + 1) * batches // workers
    return min(first * batch_size, rows), min(last * batch_size, rows)


# ---- a task's shard ----------------------------------------------------------------------------
@dataclass
class Shard:
    """A task's part of a Parquet dataset: its pieces and how many of their rows it yields.
    Picklable (a DataLoader worker gets a copy and opens the file system itself)."""

    url: str
    rank: int
    world_size: int
    pieces: list[Piece]
    rows: int
    columns: list[str] | None = None
    dropped: int = field(default=0)

    def steps(self, batch_size: int, drop_last: bool = False) -> int:
        """Batches per epoch: the same on every task with equal=True."""
        return self.rows // batch_size if drop_last else -(-self.rows // batch_size)

    def batches(self, batch_size: int, *, epoch: int = 0, shuffle: bool = False, seed: int = 0,
                drop_last: bool = False, start: int = 0, stop: int | None = None) -> Iterator[dict]:
        """{column: numpy array} batches of `batch_size` rows (the last may be short unless
        drop_last). shuffle: the pieces' order and the rows within each read of up to READ_ROWS
        rows change with seed and epoch (the same on every DataLoader worker of the task)."""
        import numpy as np
        import pyarrow as pa

        if batch_size < 1:
            raise ValueError(f"batch_size={batch_size}: must be at least 1")
        rng = np.random.default_rng([seed, epoch, self.rank]) if shuffle else None
        pieces = [self.pieces[i] for i in rng.permutation(len(self.pieces))] if rng is not None else self.pieces
        stop = self.rows if stop is None else stop
        pending: list = []
        held = 0
        for table in _read(self.url, spans(pieces, start, stop), self.columns, rng):
            pending.append(table)
            held += table.num_rows
            while held >= batch_size:
                whole = pa.concat_tables(pending)
                yield to_numpy(whole.slice(0, batch_size))
                pending, held = [whole.slice(batch_size)], held - batch_size
        if held and not drop_last:
            yield to_numpy(pa.concat_tables(pending))

    def read(self) -> dict:
        """Every row of the shard at once (small sets: evaluation, a test split)."""
        out = list(self.batches(max(self.rows, 1)))
        return out[0] if out else {}

    def torch_dataset(self, batch_size: int, *, shuffle: bool = False, seed: int = 0, drop_last: bool = False):
        """A torch IterableDataset of batches ({column: tensor}): DataLoader(..., batch_size=None).
        Each pass is the next epoch; set_epoch(e) before a pass sets it (as DistributedSampler's:
        a DataLoader without persistent_workers gives its workers fresh copies, which count from
        the last set_epoch)."""
        return _torch_dataset_class()(self, batch_size, shuffle, seed, drop_last)

    def tf_dataset(self, batch_size: int, *, shuffle: bool = False, seed: int = 0, drop_last: bool = False):
        """A tf.data.Dataset of {column: tensor} batches; each pass over it (repeat()) is the next
        epoch. Not sharded again by TF: give MultiWorkerMirroredStrategy
        distribute_datasets_from_function, or AutoShardPolicy.OFF."""
        import tensorflow as tf

        epochs = iter(range(1 << 62))

        def generate():
            yield from self.batches(batch_size, epoch=next(epochs), shuffle=shuffle, seed=seed, drop_last=drop_last)
        return tf.data.Dataset.from_generator(generate, output_signature=tf_signature(self.url, self.columns))


def shard(url: str, *, rank: int | None = None, world_size: int | None = None, by: str = "auto",
          equal: bool = True, columns: list[str] | None = None) -> Shard:
    """This task's Shard of the Parquet dataset at `url` (rank and world size from task_rank()
    unless given). Fails naming the URL when it does not exist, holds no Parquet file, or (with
    equal=True) has fewer row groups than tasks."""
    if rank is None or world_size is None:
        env_rank, env_world = task_rank()
        rank, world_size = env_rank if rank is None else rank, env_world if world_size is None else world_size
    if not 0 <= rank < world_size:
        raise ValueError(f"rank={rank} is not in 0..world_size-1 (world_size={world_size})")
    files = list_pieces(url)
    per_rank = split(files, world_size, by)
    rows = share(per_rank, rank, equal, url)
    mine = per_rank[rank]
    return Shard(url, rank, world_size, mine, rows, columns, sum(p.rows for p in mine) - rows)


# ---- I/O -------------------------------------------------------------------------------------
_HDFS_CLIENTS: dict[int, object] = {}  # every hdfs:// file system this process made, kept alive


def _after_fork_in_child() -> None:
    """Never free the parent's HDFS clients in a forked child: freeing one drops its tokio runtime,
    which waits forever for threads that exist only in the parent (fsspec clears its instance
    cache at fork, so without this reference a DataLoader worker hangs at its start). The child
    makes clients of its own."""
    import ctypes

    for instance in _HDFS_CLIENTS.values():
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(instance))
    _HDFS_CLIENTS.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def filesystem(url: str):
    """(fsspec file system, path) of a URL; hdfs:// and viewfs:// through tony_py.hdfs, safe to
    fork after (see _after_fork_in_child)."""
    import fsspec

    if url.split("://", 1)[0] in ("hdfs", "viewfs"):
        from tony_py import hdfs

        hdfs.register()
        fs, path = fsspec.core.url_to_fs(url)
        _HDFS_CLIENTS[id(fs)] = fs
        return fs, path
    return fsspec.core.url_to_fs(url)


def list_pieces(url: str) -> list[list[Piece]]:
    """The dataset's files sorted by path, each as its row groups (from the footers)."""
    import pyarrow.dataset as ds

    fs, path = filesystem(url)
    if not fs.exists(path):
        raise FileNotFoundError(2, "no such file or directory (the Parquet dataset to shard)", url)
    dataset = ds.dataset(path, filesystem=fs, format="parquet")
    fragments = sorted(dataset.get_fragments(), key=lambda f: f.path)
    if not fragments:
        raise FileNotFoundError(2, "no Parquet file in it (names starting with _ or . are skipped)", url)
    files = []
    for fragment in fragments:
        meta = fragment.metadata
        files.append([Piece(fragment.path, i, meta.row_group(i).num_rows) for i in range(meta.num_row_groups)])
    return files


def _read(url: str, reads, columns, rng) -> Iterator:
    """pyarrow Tables of the rows each read names, shuffled within each when rng is given."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    fs, _ = filesystem(url)
    for path, groups, lo, hi in reads:
        with fs.open(path, "rb") as f:
            seen = 0
            for batch in pq.ParquetFile(f).iter_batches(READ_ROWS, row_groups=groups, columns=columns):
                first, last = max(lo - seen, 0), min(hi - seen, batch.num_rows)
                seen += batch.num_rows
                if first < last:
                    table = pa.Table.from_batches([batch.slice(first, last - first)])
                    yield table.take(rng.permutation(table.num_rows)) if rng is not None else table
                if seen >= hi:
                    break


def to_numpy(table) -> dict:
    """{column: numpy array}: one value per row, or one row of a fixed-size list (or a list whose
    rows are all as long) as a 2-D array, as models take features."""
    import numpy as np
    import pyarrow as pa

    out = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_fixed_size_list(column.type) or pa.types.is_list(column.type) \
                or pa.types.is_large_list(column.type):
            lengths = column.value_lengths().to_numpy(zero_copy_only=False) if len(column) else np.zeros(0)
            if len(set(lengths.tolist())) > 1:
                raise ValueError(f"column {name!r}: lists of different lengths in one batch "
                                 "(give it a fixed size: pyarrow.list_(type, size))")
            width = int(lengths[0]) if len(lengths) else 0
            out[name] = column.flatten().to_numpy(zero_copy_only=False).reshape(len(column), width)
        else:
            out[name] = column.to_numpy(zero_copy_only=False)
    return out


def tf_signature(url: str, columns: list[str] | None) -> dict:
    """{column: tf.TensorSpec} of the dataset's batches, from its Parquet schema."""
    import pyarrow.dataset as ds
    import tensorflow as tf

    fs, path = filesystem(url)
    schema = ds.dataset(path, filesystem=fs, format="parquet").schema
    specs = {}
    for name in columns or schema.names:
        kind = schema.field(name).type
        shape: tuple = (None,)
        if hasattr(kind, "value_type"):  # a list column: one row is a vector
            shape, kind = (None, kind.list_size if getattr(kind, "list_size", -1) > 0 else None), kind.value_type
        dtype = tf.string if str(kind) in ("string", "large_string", "binary") else tf.as_dtype(kind.to_pandas_dtype())
        specs[name] = tf.TensorSpec(shape, dtype)
    return specs


def __getattr__(name: str):
    """TorchShardDataset, made on first use (importing tony_py.data imports no torch); a module
    attribute so that DataLoader's spawned workers can unpickle it."""
    if name == "TorchShardDataset":
        return _torch_dataset_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@functools.lru_cache(maxsize=None)
def _torch_dataset_class():
    import torch
    from torch.utils.data import IterableDataset, get_worker_info

    class TorchShardDataset(IterableDataset):
        """A Shard's batches as {column: tensor}; DataLoader workers each read their own run of
        whole batches (worker_rows)."""

        def __init__(self, part: Shard, batch_size: int, shuffle: bool, seed: int, drop_last: bool):
            self.shard, self.batch_size, self.shuffle, self.seed, self.drop_last = part, batch_size, shuffle, seed, drop_last
            self.epoch, self.passes = 0, 0

        def set_epoch(self, epoch: int) -> None:
            """The epoch of the next pass (later passes of this copy count on from it)."""
            self.epoch, self.passes = epoch, 0

        def __len__(self) -> int:
            return self.shard.steps(self.batch_size, self.drop_last)

        def __iter__(self):
            info = get_worker_info()
            worker, workers = (info.id, info.num_workers) if info else (0, 1)
            start, stop = worker_rows(self.shard.rows, self.batch_size, self.drop_last, worker, workers)
            epoch, self.passes = self.epoch + self.passes, self.passes + 1
            for batch in self.shard.batches(self.batch_size, epoch=epoch, shuffle=self.shuffle, seed=self.seed,
                                            drop_last=self.drop_last, start=start, stop=stop):
                # Arrow's zero-copy arrays are read-only; torch wants tensors it may write to
                yield {k: torch.from_numpy(v if v.flags.writeable else v.copy()) if v.dtype != object else v
                       for k, v in batch.items()}

    TorchShardDataset.__module__ = __name__
    TorchShardDataset.__qualname__ = "TorchShardDataset"
    return TorchShardDataset
