"""tony_py.checkpoint on the local file system (the same code commits to hdfs://, which
tests/integration/test_training_on_hdfs.py runs): a commit is all or nothing, fenced by the gang
attempt and the task's lease; the latest is the highest attempt's highest step; old ones go."""

from __future__ import annotations

import logging
import os
import time

import pytest

from tony_py import checkpoint
from tony_py.checkpoint import Checkpoint


@pytest.fixture(autouse=True)
def attempt(monkeypatch):
    """Set the task's gang attempt (TONY_RESTART_ATTEMPT) and job (JOB_ID); attempt 0 outside
    TonY-py to start with, outside any lease."""
    monkeypatch.delenv("TONY_LEASE_FILE", raising=False)
    monkeypatch.delenv("JOB_ID", raising=False)

    def set_attempt(n, job: str | None = None) -> None:
        monkeypatch.setenv("TONY_RESTART_ATTEMPT", str(n))
        if job:
            monkeypatch.setenv("JOB_ID", job)
    set_attempt(0)
    return set_attempt


def local_checkpoint(directory, **files):
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        path = directory / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return directory


def tree(path) -> dict[str, str]:
    return {os.path.relpath(os.path.join(d, f), path): open(os.path.join(d, f)).read()
            for d, _, fs in os.walk(path) for f in fs}


def test_a_committed_directory_comes_back_whole_and_no_temporary_is_left(tmp_path):
    dest = str(tmp_path / "ckpt")
    local = local_checkpoint(tmp_path / "local", **{"model.index": "i", "model.data": "d", "sub__meta": "m"})
    url = checkpoint.commit(local, dest, 100)
    assert url == f"{dest}/local-attempt-0/step-100"
    assert checkpoint.latest(dest) == Checkpoint(url, 0, 100)
    assert os.listdir(f"{dest}/local-attempt-0") == ["step-100"]  # the temporary was renamed, nothing else
    got = checkpoint.fetch(checkpoint.latest(dest), str(tmp_path / "restore"))
    assert tree(got) == {"model.index": "i", "model.data": "d", "sub/meta": "m"}
    (tmp_path / "one.npz").write_text("weights")
    assert tree(checkpoint.commit(tmp_path / "one.npz", dest, 101)) == {"one.npz": "weights"}


def test_the_latest_is_the_highest_attempts_highest_step_whatever_an_older_copy_lands_later(tmp_path, attempt):
    dest = str(tmp_path / "ckpt")
    assert checkpoint.latest(dest) is None
    checkpoint.commit(local_checkpoint(tmp_path / "a0", f="attempt 0 step 5"), dest, 5)
    attempt(1)  # the task's replacement resumes from attempt 0's step 5 and commits step 6
    assert checkpoint.latest(dest).step == 5
    checkpoint.commit(local_checkpoint(tmp_path / "a1", f="attempt 1 step 6"), dest, 6)
    assert sorted(os.listdir(dest)) == ["local-attempt-1"]  # the older attempt is gone once the newer committed
    attempt(0)  # the cut-off copy, thawed, lands a later step: in its own attempt's directory
    late = checkpoint.commit(local_checkpoint(tmp_path / "late", f="attempt 0 step 9"), dest, 9, keep=None)
    assert late == f"{dest}/local-attempt-0/step-9"
    assert checkpoint.latest(dest) == Checkpoint(f"{dest}/local-attempt-1/step-6", 1, 6)
    assert tree(f"{dest}/local-attempt-1") == {"step-6/f": "attempt 1 step 6"}  # untouched by the older copy


def test_a_later_job_on_the_same_directory_resumes_from_and_outranks_the_earlier_ones(tmp_path, attempt):
    dest = str(tmp_path / "ckpt")
    attempt(3, job="application_1700000000000_0009")  # the first job, restarted three times
    checkpoint.commit(local_checkpoint(tmp_path / "j1", f="job 1"), dest, 50)
    attempt(0, job="application_1700000000000_0010")  # the next job: a lower attempt, a later application
    assert checkpoint.latest(dest) == Checkpoint(f"{dest}/application_1700000000000_0009-attempt-3/step-50", 3, 50,
                                                 "application_1700000000000_0009")
    checkpoint.commit(local_checkpoint(tmp_path / "j2", f="job 2"), dest, 51)
    assert checkpoint.latest(dest).job == "application_1700000000000_0010"
    assert os.listdir(dest) == ["application_1700000000000_0010-attempt-0"]
    attempt(0, job="application_1800000000000_0001")  # after the RM restarted: its start time counts first
    checkpoint.commit(local_checkpoint(tmp_path / "j3", f="job 3"), dest, 52)
    attempt(9, job="application_1700000000000_0010")  # a copy of the older job, however high its attempt
    checkpoint.commit(local_checkpoint(tmp_path / "j2", f="late"), dest, 99)
    assert checkpoint.latest(dest).job == "application_1800000000000_0001"


def test_a_copy_that_lost_its_lease_commits_nothing(tmp_path, monkeypatch, caplog):
    lease = tmp_path / "lease"
    lease.write_text(str(time.monotonic() - 1))  # ran out a second ago
    monkeypatch.setenv("TONY_LEASE_FILE", str(lease))
    dest = str(tmp_path / "ckpt")
    with caplog.at_level(logging.WARNING, logger="tony_py.checkpoint"):
        assert checkpoint.commit(local_checkpoint(tmp_path / "l", f="x"), dest, 7) is None
    assert "checkpoint of step 7 not committed: this copy of the task no longer holds its lease" in caplog.text
    assert checkpoint.latest(dest) is None and tree(dest) == {}  # no step, no temporary
    lease.write_text(str(time.monotonic() + 60))
    assert checkpoint.commit(local_checkpoint(tmp_path / "l", f="x"), dest, 7) == f"{dest}/local-attempt-0/step-7"


def test_a_write_that_fails_midway_leaves_neither_a_checkpoint_nor_a_temporary(tmp_path, monkeypatch):
    dest = str(tmp_path / "ckpt")
    checkpoint.commit(local_checkpoint(tmp_path / "ok", f="step 1"), dest, 1)
    fs, _ = checkpoint.filesystem(dest)

    def cut_off(sources, targets):
        with fs.open(targets[0], "wb") as f:
            f.write(b"half")
        raise OSError(28, "No space left on device", targets[0])
    monkeypatch.setattr(type(fs), "put", lambda self, sources, targets: cut_off(sources, targets))
    with pytest.raises(OSError, match="No space left"):
        checkpoint.commit(local_checkpoint(tmp_path / "big", f="step 2"), dest, 2)
    assert tree(dest) == {"local-attempt-0/step-1/f": "step 1"}
    assert checkpoint.latest(dest).step == 1


def test_keep_holds_this_attempts_newest_and_a_step_saved_again_is_replaced(tmp_path):
    dest = str(tmp_path / "ckpt")
    for step in (1, 2, 3, 4):
        checkpoint.commit(local_checkpoint(tmp_path / "s", f=f"step {step}"), dest, step)
    assert sorted(os.listdir(f"{dest}/local-attempt-0")) == ["step-3", "step-4"]
    checkpoint.commit(local_checkpoint(tmp_path / "s", f="step 4 again"), dest, 4, keep=None)
    assert tree(f"{dest}/local-attempt-0") == {"step-3/f": "step 3", "step-4/f": "step 4 again"}
    with pytest.raises(ValueError, match=r"keep=0: keep at least 1 checkpoint \(or None: all\)"):
        checkpoint.commit(local_checkpoint(tmp_path / "s", f="x"), dest, 5, keep=0)
    assert checkpoint.latest(dest).step == 4


def test_names_that_are_no_checkpoint_are_ignored(tmp_path):
    dest = tmp_path / "ckpt"
    for junk in ("local-attempt-x", "attempt-5/step-9", "local-attempt-2/_tmp-step-9-ab12", "local-attempt-1/step-3",
                 "local-attempt-1/notes"):
        (dest / junk).mkdir(parents=True)
    assert checkpoint.latest(str(dest)) == Checkpoint(f"{dest}/local-attempt-1/step-3", 1, 3)


def test_bad_input_names_what_is_wrong(tmp_path, attempt):
    with pytest.raises(FileNotFoundError) as missing:
        checkpoint.commit(tmp_path / "nothing", str(tmp_path / "ckpt"), 1)
    assert missing.value.filename == str(tmp_path / "nothing")
    with pytest.raises(FileNotFoundError, match="no such checkpoint directory"):
        checkpoint.fetch(str(tmp_path / "ckpt/local-attempt-0/step-1"), str(tmp_path / "r"))
    with pytest.raises(ValueError, match=r"memory://ckpt: checkpoints need a file system whose rename is atomic: "
                                         r"hdfs://, viewfs:// or a local path, not memory://"):
        checkpoint.latest("memory://ckpt")
    attempt("two")
    with pytest.raises(ValueError, match=r"TONY_RESTART_ATTEMPT='two': a whole number expected"):
        checkpoint.commit(local_checkpoint(tmp_path / "l", f="x"), str(tmp_path / "ckpt"), 1)


def test_torch_save_and_load_and_dcp_round_trip(tmp_path, attempt):
    import torch

    dest = str(tmp_path / "ckpt")
    assert checkpoint.load_torch(dest) is None
    state = {"w": torch.arange(6.0).reshape(2, 3), "epoch": 3}
    url = checkpoint.save_torch(state, dest, 30)
    loaded, found = checkpoint.load_torch(dest)
    assert found == Checkpoint(url, 0, 30) and loaded["epoch"] == 3 and torch.equal(loaded["w"], state["w"])
    assert checkpoint.agree(found) == found  # no process group: the value itself
    attempt(1)
    model = {"w": torch.ones(4), "b": torch.tensor([2.0])}
    assert checkpoint.save_dcp(model, dest, 40) == f"{dest}/local-attempt-1/step-40"
    assert ".metadata" in os.listdir(f"{dest}/local-attempt-1/step-40")
    into = {"w": torch.zeros(4), "b": torch.zeros(1)}
    assert checkpoint.load_dcp(into, dest) == Checkpoint(f"{dest}/local-attempt-1/step-40", 1, 40)
    assert torch.equal(into["w"], model["w"]) and torch.equal(into["b"], model["b"])
    assert os.listdir(dest) == ["local-attempt-1"]
