"""Checkpoints on hdfs:// (or viewfs://, or a local path), committed all or nothing and fenced by
the gang attempt, so a restarted task on any host resumes from the last one and a cut-off copy
of a task can never overwrite what a newer copy wrote.

    from tony_py import checkpoint
    # PyTorch: torch.save / torch.load, and torch.distributed.checkpoint (every rank calls)
    checkpoint.save_torch({"model": m.state_dict(), "epoch": e}, "hdfs:///user/me/ckpt", step)
    state, found = checkpoint.load_torch("hdfs:///user/me/ckpt") or (None, None)
    checkpoint.save_dcp({"model": m.state_dict()}, "hdfs:///user/me/ckpt", step)
    # TensorFlow, JAX (Orbax and tf.train.Checkpoint cannot write hdfs://): save locally, commit;
    # to resume, fetch the latest into a local directory and restore from there
    tf.train.Checkpoint(...).write("/tmp/ck/model"); checkpoint.commit("/tmp/ck", dest, step)
    found = checkpoint.latest(dest); found and checkpoint.fetch(found.url, "/tmp/restore")

Layout: <dest>/<job>-attempt-<A>/step-<S>/ holds one checkpoint (the files of a committed
directory, or state.pt, or DCP's files). <job>-attempt-<A> is the writer's generation: its job
(JOB_ID, the YARN application id; `local` outside TonY-py) and its gang attempt
(TONY_RESTART_ATTEMPT), which grows with every copy of a task; generations sort by application
(the RM's start time, then its sequence number), then attempt, so a job rerun on the same
directory resumes from and outranks the runs before it. A checkpoint is written under
<dest>/<generation>/_tmp-step-<S>-.../ and renamed to step-<S> (one atomic rename on HDFS and on a
local file system): a step-<S> that exists is complete. Just before the rename the task checks
that it still holds its lease (tony_py.task.holds_lease()): a copy that may have been replaced
commits nothing. A copy frozen between that check and its rename still lands its checkpoint after
the thaw, but in its own generation's directory: latest() takes the highest generation that has
one, so the newer copy's checkpoints win. After each commit, keep=K keeps this generation's K
newest and deletes every older generation's directory (never a newer one's).

Where every rank resumes on its own (all ranks call load_*), let them agree on one checkpoint:
agree(latest(dest)) is rank 0's answer on every rank (load_dcp does it itself). A late landing
of an older attempt between two ranks' listings could otherwise give them different ones.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import warnings
from typing import NamedTuple

log = logging.getLogger(__name__)
ATOMIC_RENAME = ("hdfs", "viewfs", "file", "local")
TORCH_FILE = "state.pt"
_STEP = re.compile(r"step-(\d+)$")
_GENERATION = re.compile(r"(.+)-attempt-(\d+)$")
_APPLICATION = re.compile(r"application_(\d+)_(\d+)$")


class Checkpoint(NamedTuple):
    """A committed checkpoint: its URL (a directory), the gang attempt and the step that wrote
    it, and the job (its application id)."""

    url: str
    attempt: int
    step: int
    job: str = "local"


class Generation(NamedTuple):
    """Who writes: a job and its gang attempt. Later generations sort higher (order())."""

    job: str
    attempt: int

    @property
    def name(self) -> str:
        return f"{self.job}-attempt-{self.attempt}"

    def order(self) -> tuple[int, int, int]:
        app = _APPLICATION.match(self.job)
        return (int(app.group(1)), int(app.group(2)), self.attempt) if app else (0, 0, self.attempt)


def current() -> Generation:
    """This task's generation: JOB_ID (`local` outside TonY-py) and TONY_RESTART_ATTEMPT (0)."""
    value = os.environ.get("TONY_RESTART_ATTEMPT", "0")
    try:
        attempt = int(value)
    except ValueError:
        raise ValueError(f"TONY_RESTART_ATTEMPT={value!r}: a whole number expected") from None
    return Generation(re.sub(r"[^\w.-]", "_", os.environ.get("JOB_ID") or "local"), attempt)


def _checkpoint(dest_url: str, generation: Generation, step: int) -> Checkpoint:
    return Checkpoint(_join(dest_url, generation.name, f"step-{step}"), generation.attempt, step, generation.job)


def filesystem(url: str):
    """(fsspec file system, path) of a checkpoint URL; refuses a file system whose rename is
    not one atomic step (object stores copy, then delete)."""
    from tony_py.data import filesystem as url_to_fs

    fs, path = url_to_fs(str(url))
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    if not set(protocols) & set(ATOMIC_RENAME):
        raise ValueError(f"{url}: checkpoints need a file system whose rename is atomic: "
                         f"{', '.join(p + '://' for p in ATOMIC_RENAME[:2])} or a local path, not {protocols[0]}://")
    return fs, path


def latest(dest_url: str) -> Checkpoint | None:
    """The newest checkpoint under `dest_url`: the highest generation (job, then attempt) that
    committed one, its highest step. None when there is none (or no `dest_url` yet)."""
    fs, root = filesystem(dest_url)
    for generation in sorted(_generations(fs, root), key=Generation.order, reverse=True):
        steps = _numbered(fs, _join(root, generation.name), _STEP)
        if steps:
            return _checkpoint(dest_url, generation, max(steps)[0])
    return None


def agree(found: Checkpoint | None, process_group=None) -> Checkpoint | None:
    """Rank 0's `found` on every rank of torch.distributed's group (every rank must call); the
    value itself where torch.distributed is not initialized."""
    import torch.distributed as dist

    if _alone():
        return found
    box = [found]
    dist.broadcast_object_list(box, src=_coordinator(process_group), group=process_group)
    return box[0]


def commit(local_path: str, dest_url: str, step: int, *, keep: int | None = 2) -> str | None:
    """Upload a local file or directory as the checkpoint of `step` (a directory: its files; a
    file: itself, by its name) and commit it. The committed URL, or None when this task no longer
    holds its lease (nothing is committed then)."""
    local_path = os.fspath(local_path)
    if not os.path.exists(local_path):
        raise FileNotFoundError(2, "no such file or directory (the local checkpoint to commit)", local_path)
    if os.path.isdir(local_path):
        names = sorted(os.path.relpath(os.path.join(d, f), local_path) for d, _, fs in os.walk(local_path) for f in fs)
        sources = [os.path.join(local_path, n) for n in names]
    else:
        names, sources = [os.path.basename(local_path)], [local_path]
    fs, _ = filesystem(dest_url)
    tmp = _temp(dest_url, step)
    try:
        targets = [_join(tmp, n) for n in names]
        for parent in sorted({_parent(t) for t in targets} | {tmp}):
            fs.makedirs(parent, exist_ok=True)
        if sources:
            fs.put(sources, targets)
        return _publish(fs, tmp, dest_url, step, keep)
    finally:
        _discard(fs, tmp)


def fetch(url: str | Checkpoint, local_dir: str) -> str:
    """Download a checkpoint's files into `local_dir` (created; same relative names); returns it."""
    url = url.url if isinstance(url, Checkpoint) else str(url)
    fs, root = filesystem(url)
    if not fs.isdir(root):
        raise FileNotFoundError(2, "no such checkpoint directory", url)
    remote = sorted(fs.find(root))
    local = [os.path.join(local_dir, fs._strip_protocol(r)[len(root):].lstrip("/")) for r in remote]
    for parent in {os.path.dirname(p) for p in local} | {os.fspath(local_dir)}:
        os.makedirs(parent, exist_ok=True)
    if remote:
        fs.get(remote, local)
    return os.fspath(local_dir)


def save_torch(obj, dest_url: str, step: int, *, keep: int | None = 2) -> str | None:
    """torch.save(obj) as the checkpoint of `step`, streamed to the file system (no local copy).
    Call it on the rank that saves (rank 0 for DDP). The URL, or None (lease lost)."""
    import torch

    fs, _ = filesystem(dest_url)
    tmp = _temp(dest_url, step)
    try:
        fs.makedirs(tmp, exist_ok=True)
        with fs.open(_join(tmp, TORCH_FILE), "wb") as f:
            torch.save(obj, f)
        return _publish(fs, tmp, dest_url, step, keep)
    finally:
        _discard(fs, tmp)


def load_torch(where: str | Checkpoint, **torch_load_kwargs):
    """(torch.load's object, Checkpoint) of `where`: a Checkpoint, or a destination whose latest()
    it loads. None when the destination holds none. weights_only defaults to True, as torch's."""
    import torch

    found = where if isinstance(where, Checkpoint) else latest(where)
    if found is None:
        return None
    fs, _ = filesystem(found.url)
    with fs.open(_join(found.url, TORCH_FILE), "rb") as f:
        return torch.load(f, **torch_load_kwargs), found


def save_dcp(state_dict: dict, dest_url: str, step: int, *, keep: int | None = 2, process_group=None) -> str | None:
    """torch.distributed.checkpoint.save of `state_dict` as the checkpoint of `step`: every rank
    writes its part into one temporary directory, rank 0 commits it once DCP finished (DCP
    gathers every rank's writes before its metadata). Every rank of the group calls it and gets
    rank 0's result: the URL, or None (rank 0 lost its lease)."""
    import torch.distributed.checkpoint as dcp

    fs, _ = filesystem(dest_url)
    tmp = _join(dest_url, current().name, f"_tmp-step-{step}-dcp")  # one name on every rank
    coordinator = _rank(process_group) == 0
    if coordinator and fs.exists(tmp):  # an earlier try of this step in this attempt (before any rank writes:
        fs.rm(tmp, recursive=True)      # DCP writes only after its first collective)
    try:
        with _single_process_is_meant():
            dcp.save(state_dict, storage_writer=dcp.FsspecWriter(tmp), process_group=process_group, no_dist=_alone())
        committed = _publish(fs, tmp, dest_url, step, keep) if coordinator else None
    finally:
        if coordinator:
            _discard(fs, tmp)
    return _broadcast(committed, process_group)


def load_dcp(state_dict: dict, dest_url: str, *, process_group=None) -> Checkpoint | None:
    """torch.distributed.checkpoint.load into `state_dict` (in place) from the latest checkpoint
    under `dest_url`, the one rank 0 found. Every rank calls it. None when there is none."""
    import torch.distributed.checkpoint as dcp

    found = agree(latest(dest_url) if _rank(process_group) == 0 else None, process_group)
    if found is not None:
        with _single_process_is_meant():
            dcp.load(state_dict, storage_reader=dcp.FsspecReader(found.url), process_group=process_group,
                     no_dist=_alone())
    return found


# ---- the commit ---------------------------------------------------------------------------------
def _publish(fs, tmp: str, dest_url: str, step: int, keep: int | None) -> str | None:
    """Rename the written `tmp` to its step's name while this task holds its lease; then prune."""
    from tony_py.task import holds_lease

    if keep is not None and keep < 1:
        raise ValueError(f"keep={keep}: keep at least 1 checkpoint (or None: all)")
    generation = current()
    final = _checkpoint(dest_url, generation, step).url
    if not holds_lease():
        log.warning("checkpoint of step %s not committed: this copy of the task no longer holds its lease "
                    "(a newer copy may run)", step)
        return None
    if fs.exists(final):  # this step again in this attempt: the newer write replaces it
        fs.rm(final, recursive=True)
    _rename(fs, tmp, final)
    if keep is not None:
        _prune(fs, dest_url, generation, keep)
    return final


def _rename(fs, src: str, dst: str) -> None:
    if "file" in ((fs.protocol,) if isinstance(fs.protocol, str) else fs.protocol):
        os.rename(fs._strip_protocol(src), fs._strip_protocol(dst))  # fsspec's local mv would move *into* dst
    else:
        fs.mv(src, dst)  # HDFS rename: one NameNode operation, fails if dst exists


def _prune(fs, dest_url: str, generation: Generation, keep: int) -> None:
    """Delete this generation's checkpoints but the `keep` newest, and every older generation."""
    root = fs._strip_protocol(dest_url)
    for older in _generations(fs, root):
        if older.order() < generation.order():
            fs.rm(_join(root, older.name), recursive=True)
    mine = _join(root, generation.name)
    for _, name in sorted(_numbered(fs, mine, _STEP))[:-keep]:
        fs.rm(_join(mine, name), recursive=True)


def _discard(fs, tmp: str) -> None:
    try:
        if fs.exists(tmp):
            fs.rm(tmp, recursive=True)
    except OSError as exc:  # the write's own error (or the commit) matters more
        log.warning("could not remove the temporary checkpoint %s: %s", tmp, exc)


def _temp(dest_url: str, step: int) -> str:
    return _join(dest_url, current().name, f"_tmp-step-{step}-{secrets.token_hex(4)}")


def _names(fs, path: str) -> list[str]:
    try:
        return [os.path.basename(n.rstrip("/")) for n in fs.ls(path, detail=False)]
    except FileNotFoundError:
        return []


def _numbered(fs, path: str, pattern: re.Pattern) -> list[tuple[int, str]]:
    """(number, name) of the entries of `path` whose names match `pattern` ([] if it is missing)."""
    return [(int(m.group(1)), n) for n in _names(fs, path) if (m := pattern.match(n))]


def _generations(fs, path: str) -> list[Generation]:
    return [Generation(m.group(1), int(m.group(2))) for n in _names(fs, path) if (m := _GENERATION.match(n))]


def _join(url: str, *parts: str) -> str:
    return "/".join([str(url).rstrip("/"), *parts])


def _parent(url: str) -> str:
    return url.rsplit("/", 1)[0]


# ---- torch.distributed ----------------------------------------------------------------------
def _alone() -> bool:
    import torch.distributed as dist

    return not dist.is_available() or not dist.is_initialized()


@contextlib.contextmanager
def _single_process_is_meant():
    """Silence DCP's warning that it assumes one process when torch.distributed is not
    initialized: that is what these helpers mean then."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def _rank(process_group) -> int:
    import torch.distributed as dist

    return 0 if _alone() else dist.get_rank(process_group)


def _coordinator(process_group) -> int:
    """The global rank of the group's rank 0."""
    import torch.distributed as dist

    return dist.get_global_rank(process_group, 0) if process_group is not None else 0


def _broadcast(value, process_group):
    import torch.distributed as dist

    if _alone():
        return value
    box = [value]
    dist.broadcast_object_list(box, src=_coordinator(process_group), group=process_group)
    return box[0]
