"""tony_py.data: which rows each task gets (the split, an uneven one, fewer row groups than
tasks), from which env, and that the batches carry exactly those rows, for numpy and PyTorch's
DataLoader with workers; Parquet on the local file system (the same code reads hdfs://, which
tests/integration/test_training_on_hdfs.py runs)."""

from __future__ import annotations

import json
import pickle
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tony_py import data
from tony_py.data import Piece


def write(directory, sizes, row_group_size=4):
    """Parquet files part-<i> of sizes[i] rows; row ids are globally unique (y) and x = [y, -y]."""
    directory.mkdir(parents=True, exist_ok=True)
    first = 0
    for i, n in enumerate(sizes):
        y = np.arange(first, first + n)
        x = np.stack([y, -y], axis=1).astype(np.float32).ravel()
        table = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(x), 2), "y": pa.array(y)})
        pq.write_table(table, directory / f"part-{i:05d}.parquet", row_group_size=row_group_size)
        first += n
    (directory / "_SUCCESS").write_text("")  # Spark's marker: skipped
    return str(directory)


def ids(part, batch_size=3, **kwargs):
    return [int(v) for b in part.batches(batch_size, **kwargs) for v in b["y"]]


# ---- rank and world size from the task's env --------------------------------------------------
@pytest.mark.parametrize("env, expected", [
    ({"RANK": "1", "WORLD_SIZE": "4", "TASK_INDEX": "0", "TASK_NUM": "9"}, (1, 4)),  # PyTorch's first
    ({"JAX_PROCESS_ID": "2", "JAX_NUM_PROCESSES": "3"}, (2, 3)),
    ({"TF_CONFIG": json.dumps({"cluster": {"chief": ["a:1"], "worker": ["b:1", "c:1"], "ps": ["d:1"]},
                               "task": {"type": "worker", "index": 1}})}, (2, 3)),  # chief first, as TonY-py
    ({"TF_CONFIG": json.dumps({"cluster": {"worker": ["b:1", "c:1"]}, "task": {"type": "worker", "index": 0}})},
     (0, 2)),
    ({"TASK_INDEX": "1", "TASK_NUM": "2"}, (1, 2)),
    ({}, (0, 1)),
])
def test_rank_and_world_size_come_from_the_framework_env(env, expected):
    assert data.task_rank(env) == expected


def test_a_ps_task_or_bad_numbers_say_what_is_wrong():
    ps = json.dumps({"cluster": {"worker": ["b:1"], "ps": ["d:1"]}, "task": {"type": "ps", "index": 0}})
    with pytest.raises(ValueError, match=r"ps:0, which trains on no shard \(only worker tasks do\)"):
        data.task_rank({"TF_CONFIG": ps})
    with pytest.raises(ValueError, match=r"RANK=2 is not in 0..WORLD_SIZE-1 \(WORLD_SIZE=2\)"):
        data.task_rank({"RANK": "2", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match=r"RANK='x' and WORLD_SIZE='2': both must be whole numbers"):
        data.task_rank({"RANK": "x", "WORLD_SIZE": "2"})


# ---- the split (pure) ----------------------------------------------------------------------------
def files_of(*sizes, groups=1):
    return [[Piece(f"f{i}", g, n) for g in range(groups)] for i, n in enumerate(sizes)]


def test_whole_files_go_round_robin_when_they_split_evenly():
    per_rank = data.split(files_of(5, 5, 5, 5), 2)
    assert [[p.path for p in ps] for ps in per_rank] == [["f0", "f2"], ["f1", "f3"]]


def test_row_groups_when_there_are_fewer_files_than_tasks_or_they_split_worse():
    per_rank = data.split(files_of(4, groups=3), 3)  # one file of 3 row groups, 3 tasks: one each
    assert [[(p.path, p.row_group) for p in ps] for ps in per_rank] == [[("f0", 0)], [("f0", 1)], [("f0", 2)]]
    uneven = files_of(10, 10, 40, groups=2)  # files of 20, 20, 80 rows: by file 100 vs 20, by row group 60 vs 60
    assert [sum(p.rows for p in ps) for ps in data.split(uneven, 2)] == [60, 60]
    assert [sum(p.rows for p in ps) for ps in data.split(uneven, 2, by="file")] == [100, 20]
    with pytest.raises(ValueError, match=r"by='rows': use one of auto, file, row_group"):
        data.split(uneven, 2, by="rows")


def test_equal_gives_every_task_the_smallest_share_and_fewer_row_groups_than_tasks_is_an_error():
    per_rank = data.split(files_of(7, 5, 6), 2, by="file")  # 13 vs 5
    assert [data.share(per_rank, r, True, "ds") for r in range(2)] == [5, 5]
    assert [data.share(per_rank, r, False, "ds") for r in range(2)] == [13, 5]
    few = data.split(files_of(9, groups=2), 3)  # 2 row groups, 3 tasks
    with pytest.raises(ValueError, match=r"ds: 2 row group\(s\) with rows for 3 tasks, so task\(s\) 2 would get no "
                                         r"rows .*row_group_size.*equal=False"):
        data.share(few, 2, True, "ds")
    assert data.share(few, 2, False, "ds") == 0  # equal=False: an empty shard, the caller's to handle


def test_spans_read_each_file_once_where_its_row_groups_follow_each_other():
    pieces = [Piece("a", 0, 4), Piece("a", 1, 4), Piece("b", 0, 4), Piece("a", 3, 4)]
    assert data.spans(pieces, 0, 16) == [("a", [0, 1], 0, 8), ("b", [0], 0, 4), ("a", [3], 0, 4)]
    assert data.spans(pieces, 2, 10) == [("a", [0, 1], 2, 8), ("b", [0], 0, 2)]
    assert data.spans(pieces, 5, 6) == [("a", [1], 1, 2)]
    assert data.spans(pieces, 3, 3) == []


@pytest.mark.parametrize("rows, batch, drop_last, workers", [(10, 3, False, 2), (10, 3, True, 3), (2, 4, False, 3)])
def test_dataloader_workers_take_contiguous_whole_batches_and_together_all_of_them(rows, batch, drop_last, workers):
    ranges = [data.worker_rows(rows, batch, drop_last, w, workers) for w in range(workers)]
    covered = [r for start, stop in ranges for r in range(start, stop)]
    expected = rows - rows % batch if drop_last else rows
    assert covered == list(range(expected))
    assert all(start % batch == 0 for start, _ in ranges)


# ---- reading Parquet ------------------------------------------------------------------------------
def test_every_row_once_across_tasks_and_an_uneven_split_is_equalised(tmp_path):
    url = write(tmp_path / "ds", [10, 11, 12])
    parts = [data.shard(url, rank=r, world_size=2, equal=False) for r in range(2)]
    assert sorted(i for p in parts for i in ids(p)) == list(range(33))
    equal = [data.shard(url, rank=r, world_size=2) for r in range(2)]
    assert [p.rows for p in equal] == [15, 15] and [p.dropped for p in equal] == [3, 0]
    assert [len(ids(p)) for p in equal] == [15, 15]
    assert [p.steps(4) for p in equal] == [4, 4] and [len(list(p.batches(4))) for p in equal] == [4, 4]
    assert not set(ids(equal[0])) & set(ids(equal[1]))
    batch = next(equal[0].batches(3))
    assert batch["x"].shape == (3, 2) and batch["x"].dtype == np.float32
    assert (batch["x"][:, 0] == batch["y"]).all() and (batch["x"][:, 1] == -batch["y"]).all()


def test_shuffle_changes_the_order_by_epoch_and_keeps_the_rows(tmp_path):
    url = write(tmp_path / "ds", [40, 40])
    part = data.shard(url, rank=0, world_size=1)
    plain, one, again, two = (ids(part), ids(part, shuffle=True, epoch=1), ids(part, shuffle=True, epoch=1),
                              ids(part, shuffle=True, epoch=2))
    assert sorted(one) == sorted(two) == plain == list(range(80))
    assert one == again and one != plain and one != two
    assert len(list(part.batches(7, drop_last=True))) == 80 // 7


def test_a_column_selection_and_a_whole_split_at_once(tmp_path):
    url = write(tmp_path / "ds", [6])
    everything = data.shard(url, rank=0, world_size=1, columns=["y"]).read()
    assert list(everything) == ["y"] and everything["y"].tolist() == list(range(6))


def test_a_missing_dataset_or_one_without_parquet_names_the_path(tmp_path):
    with pytest.raises(FileNotFoundError) as missing:
        data.shard(str(tmp_path / "nope"), rank=0, world_size=1)
    assert missing.value.filename == str(tmp_path / "nope") and "the Parquet dataset to shard" in str(missing.value)
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    with pytest.raises(FileNotFoundError, match="no Parquet file in it"):
        data.shard(str(tmp_path / "empty"), rank=0, world_size=1)


def test_the_torch_dataset_yields_the_same_batches_with_dataloader_workers(tmp_path):
    import torch
    from torch.utils.data import DataLoader

    url = write(tmp_path / "ds", [10, 11, 12])
    part = data.shard(url, rank=1, world_size=2)
    dataset = part.torch_dataset(4, shuffle=True, seed=3)
    assert pickle.loads(pickle.dumps(dataset)).shard == part  # what a spawned worker receives
    dataset.set_epoch(2)
    alone = list(DataLoader(dataset, batch_size=None))
    workers = list(DataLoader(dataset, batch_size=None, num_workers=2, multiprocessing_context="fork"))
    assert len(alone) == len(workers) == len(dataset) == part.steps(4)
    assert isinstance(alone[0]["y"], torch.Tensor) and alone[0]["x"].shape == (4, 2)
    rows = Counter(int(v) for b in workers for v in b["y"])
    assert rows == Counter(int(v) for b in alone for v in b["y"]) and len(rows) == part.rows
