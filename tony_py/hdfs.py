"""`hdfs://` in task code, through hdfs-native (a Rust HDFS client: no JVM, no libhdfs), with
what training code needs that its fsspec file system lacks. Needs `pip install 'tony-py[hdfs]'`
(or `hdfs-native`) in the job's venv; this module itself ships with every task (tony_py is on
each task's PYTHONPATH).

    import tony_py.hdfs                      # once: fsspec's hdfs:// and viewfs:// are these now
    with fsspec.open("hdfs:///data/part-0.parquet", "rb") as f: ...
    pyarrow.dataset.dataset("hdfs:///data/train", format="parquet")   # no libhdfs, no JVM
    torch.save(model.state_dict(), fsspec.open("hdfs:///ckpt/model.pt", "wb").open())
    torch.distributed.checkpoint.save(state, storage_writer=FsspecWriter("hdfs:///ckpt/step-100"))

hdfs-native reads what a task container has: HADOOP_CONF_DIR (fs.defaultFS, NameNode HA,
viewfs mounts, dfs.data.transfer.protection) and, on a secure cluster, the container's
delegation tokens (HADOOP_TOKEN_FILE_LOCATION), which the TonY-py client fetched at submit time,
with a copy under each NameNode's host:port name (hdfs-native picks a token by the literal
address of the URL it opens, Hadoop names them by IP:port); on an insecure cluster it acts as
HADOOP_USER_NAME, which TonY-py sets to the job's user in every task. hdfs-native reads the
token file each time it opens a NameNode connection, and the executor renames each renewed set
over it, so a task that runs longer than its first tokens needs to do nothing (docs/hdfs.md).

What this adds to hdfs-native's own file system:
- readers with `readinto` (`torch.load` and `io.BufferedReader` call it);
- writers with `tell` (torch.distributed.checkpoint's FsspecWriter calls it) and `flush`;
- errors that name the path and HDFS's reason (FileNotFoundError, PermissionError, OSError),
  never a Rust panic or an RPC error's Java stack, from opening, listing and moving as from
  reading and writing;
- pyarrow's own resolution of an `hdfs://` or `viewfs://` string (`pyarrow.dataset.dataset`,
  `pyarrow.parquet.read_table`, `ParquetFile`), which would load libhdfs and a JVM, goes here.
"""

from __future__ import annotations

import errno
import functools
import os
import re
import sys
from typing import Iterator

PROTOCOLS = ("hdfs", "viewfs")
_JAVA_EXCEPTION = re.compile(r'RPCError\("([\w.$]+)", "([^"\n\\]*)')
_ERRNO = {FileNotFoundError: errno.ENOENT, PermissionError: errno.EACCES, FileExistsError: errno.EEXIST,
          NotADirectoryError: errno.ENOTDIR}
_BY_JAVA = {"FileNotFoundException": FileNotFoundError, "AccessControlException": PermissionError,
            "FileAlreadyExistsException": FileExistsError, "ParentNotDirectoryException": NotADirectoryError}
# hdfs-native found no delegation token for the NameNode's address (none there, or one that dies
# within 60 s) and fell back to Kerberos, which a task container has no ticket for
_NO_CREDENTIALS = ("GSS_S_NO_CRED", "No Kerberos credentials", "NoSASLMechanism")


def _installed():
    try:
        import fsspec  # noqa: F401
        import hdfs_native.fsspec
    except ImportError as exc:
        raise ImportError("hdfs:// in a task needs hdfs-native in the job's venv: pip install 'tony-py[hdfs]' "
                          f"(or hdfs-native and fsspec) ({exc})") from None
    return hdfs_native


def _no_credentials(text: str) -> str | None:
    """What to say when hdfs-native had neither a token nor a ticket for the NameNode."""
    if not any(marker in text for marker in _NO_CREDENTIALS):
        return None
    tokens = os.environ.get("HADOOP_TOKEN_FILE_LOCATION")
    where = (f"no HDFS delegation token in HADOOP_TOKEN_FILE_LOCATION ({tokens}) under this NameNode's address "
             "as the URL names it (host:port, or ha-hdfs:<nameservice>) that lives another 60 s"
             if tokens else "no HADOOP_TOKEN_FILE_LOCATION")
    return f"no credentials for HDFS: {where}, and no Kerberos ticket"


def translate(path: str, exc: BaseException) -> OSError:
    """An hdfs-native failure as the OSError a Python user expects, naming the path and why."""
    if isinstance(exc, OSError) and exc.filename:
        return exc
    text = str(exc)
    m = _JAVA_EXCEPTION.search(text)
    java, reason = (m.group(1).rsplit(".", 1)[-1], m.group(2)) if m else (None, text.splitlines()[0] if text else "")
    kind = _BY_JAVA.get(java) or (type(exc) if isinstance(exc, OSError) else OSError)
    denied = None if m else _no_credentials(text)
    if denied:
        kind, reason = PermissionError, denied
    code = _ERRNO.get(kind) or getattr(exc, "errno", None) or errno.EIO
    return kind(code, f"{reason or type(exc).__name__} (HDFS{': ' + java if java else ''})", path)


def _rethrown(path: str, exc: BaseException, kinds=(OSError, RuntimeError, ValueError)) -> OSError:
    """translate(), for the exceptions hdfs-native raises; anything else is re-raised as it is."""
    # pyo3's PanicException is a BaseException
    if isinstance(exc, kinds) or type(exc).__name__ == "PanicException":
        return translate(path, exc)
    raise exc


def _translating(fn):
    @functools.wraps(fn)
    def wrapper(self, path, *args, **kwargs):
        try:
            return fn(self, path, *args, **kwargs)
        except BaseException as exc:
            raise _rethrown(str(path), exc) from exc
    return wrapper


def _stream_translating(fn):
    """For a reader's or writer's own methods: the path is the one it was opened with."""
    @functools.wraps(fn)
    def wrapper(self, *args, **kwargs):
        try:
            return fn(self, *args, **kwargs)
        except BaseException as exc:
            # a ValueError from a stream is Python's own (a closed file): it stays one
            raise _rethrown(getattr(self, "path", "?"), exc, (OSError, RuntimeError)) from exc
    return wrapper


class SequentialReads:
    """read() and readinto() for hdfs-native's FileReader (its `inner` is the Rust reader), from
    one stream (read_range_stream, to the end of the file) for as long as reads follow on from
    each other; a read elsewhere (after a seek) opens a new one.

    Its own read(n) is one request to a DataNode per call (a new block reader each time): 64 KiB
    reads, as shutil.copyfileobj and BufferedReader make, reached 19 MB/s where 16 MiB reads
    reached 108 MB/s; and a large read is slower than the same bytes from a stream (26 MB, as
    pyarrow reads a row group: 62-107 against 106-163 MB/s, one host, loaded; bench/hdfs_io.py).
    readinto() copies the stream's packets straight into the caller's buffer (torch.load's)."""

    _stream = None  # the open stream's iterator; it gives the bytes after _stream_end
    _stream_end = -1  # the file position of the first byte the stream has not given yet
    _held, _held_at = b"", 0  # what the stream gave beyond the last read: _held[_held_at:]

    def read(self, size=-1) -> bytes:
        parts = self._take(-1 if size is None else size)
        if len(parts) == 1:
            return bytes(parts[0])
        return b"".join(parts)

    def readinto(self, buffer) -> int:
        view = memoryview(buffer).cast("B")
        at = 0
        for part in self._take(len(view)):
            view[at:at + len(part)] = part
            at += len(part)
        return at

    def _take(self, size: int) -> list:
        """The next `size` bytes (all that is left if negative) as pieces, the position moved past them."""
        pos, length = self.inner.tell(), self.inner.file_length()
        want = length - pos if size < 0 else min(size, length - pos)
        if want <= 0:
            return [b""]
        if self._stream is None or self._stream_end - (len(self._held) - self._held_at) != pos:
            parts = self._from_new_stream(pos, length, want)
        else:
            try:
                parts = self._from_stream(want)
            except (OSError, RuntimeError):  # e.g. the DataNode closed an idle stream: once more, afresh
                parts = self._from_new_stream(pos, length, want)
        self.inner.seek(pos + sum(len(p) for p in parts))
        return parts

    def _from_new_stream(self, pos: int, length: int, want: int) -> list:
        self._stream, self._stream_end = iter(self.inner.read_range_stream(pos, length - pos)), pos
        self._held, self._held_at = b"", 0
        return self._from_stream(want)

    def _from_stream(self, want: int) -> list:
        parts, have = [], 0
        if self._held_at < len(self._held):
            part = memoryview(self._held)[self._held_at:self._held_at + want]
            parts.append(part)
            have, self._held_at = len(part), self._held_at + len(part)
        while have < want:
            chunk = next(self._stream, None)
            if chunk is None:
                break
            self._stream_end += len(chunk)
            if len(chunk) > want - have:
                parts.append(memoryview(chunk)[:want - have])
                self._held, self._held_at = chunk, want - have
                have = want
            else:
                parts.append(chunk)
                have += len(chunk)
        return parts or [b""]


_WRITE_COPY = 8 << 20  # the most of a non-bytes buffer copied into bytes at once (bytes_pieces)


def bytes_pieces(buf) -> Iterator[bytes]:
    """What the writer hands hdfs-native for buf: bytes as they are; any other buffer (torch.save
    writes memoryviews of its tensors) as bytes copies of at most _WRITE_COPY each, because
    hdfs-native takes bytes fast and other buffers 3-7x slower (a 64 MiB memoryview: 41 MB/s,
    the same as bytes: 298 MB/s; a 1 GiB torch.save went from 63 to 192 MB/s)."""
    if isinstance(buf, bytes):
        yield buf
        return
    view = memoryview(buf).cast("B")
    for at in range(0, len(view), _WRITE_COPY):
        yield bytes(view[at:at + _WRITE_COPY])


@functools.lru_cache(maxsize=None)
def _classes():
    """The wrapped reader, writer and file systems (made once, on first use: hdfs-native loads then)."""
    hn = _installed()

    class Reader(SequentialReads, hn.FileReader):
        path = "?"  # set by _open

    class Writer(hn.FileWriter):
        path = "?"  # set by _open
        _written = 0  # set per instance by the first write

        def write(self, buf) -> int:
            n = sum(super(Writer, self).write(piece) for piece in bytes_pieces(buf))
            self._written += n
            return n

        def tell(self) -> int:
            return self._written

        def flush(self) -> None:  # data is durable at close (hsync() for earlier); nothing buffered here
            pass

        def seekable(self) -> bool:
            return False

    for cls, names in ((Reader, ("read", "readinto", "seek", "read_range", "read_range_stream")),
                       (Writer, ("write", "hsync", "close"))):
        for name in names:
            setattr(cls, name, _stream_translating(getattr(cls, name)))

    class Mixin:
        def _open(self, path, mode="rb", **kwargs):
            handle = super()._open(path, mode, **kwargs)
            # the same objects, given the methods they lack (a second wrapper would close the
            # first's stream when the first is collected: IOBase.__del__ closes)
            raw = getattr(handle, "raw", handle)  # a BufferedReader's raw reader when block_size was given
            if type(raw) is hn.FileReader:
                raw.__class__ = Reader
                raw.path = str(path)
            elif type(handle) is hn.FileWriter:
                handle.__class__ = Writer
                handle.path = str(path)
            return handle

    for name in ("_open", "info", "ls", "mv", "mkdir", "rm", "rmdir", "du", "touch", "modified"):
        setattr(Mixin, name, _translating(getattr(Mixin, name, None) or getattr(hn.fsspec.BaseFileSystem, name)))

    class HdfsFileSystem(Mixin, hn.fsspec.HdfsFileSystem):
        pass

    class ViewfsFileSystem(Mixin, hn.fsspec.ViewfsFileSystem):
        pass

    return Reader, Writer, {"hdfs": HdfsFileSystem, "viewfs": ViewfsFileSystem}


def _pyarrow_resolves_here() -> None:
    """pyarrow resolves a string `hdfs://` path itself (`FileSystem.from_uri`: libhdfs and a JVM,
    which a task has not), in `_resolve_filesystem_and_path`, which `pyarrow.dataset` and
    `pyarrow.parquet` call when given no `filesystem=`. Wrapped here so those strings get this
    file system (as pyarrow's own `filesystem=<an fsspec file system>` would). A private function:
    without it (another pyarrow), nothing changes and `filesystem=tony_py.hdfs.filesystem()`
    still works (tests/unit/test_hdfs_pyarrow.py fails first)."""
    pafs = sys.modules.get("pyarrow.fs")
    if pafs is None:
        try:
            import pyarrow.fs as pafs
        except ImportError:
            return
    original = getattr(pafs, "_resolve_filesystem_and_path", None)
    if original is None:
        return
    if not getattr(original, "tony_hdfs", False):
        @functools.wraps(original)
        def resolve(path, filesystem=None, **kwargs):
            if filesystem is None and isinstance(path, str) and "://" in path and path.partition("://")[0] in PROTOCOLS:
                fs = _of_url(path)
                return pafs.PyFileSystem(pafs.FSSpecHandler(fs)), fs._strip_protocol(path)
            return original(path, filesystem, **kwargs)

        resolve.tony_hdfs = True
        pafs._resolve_filesystem_and_path = resolve
    # pyarrow.parquet took its own reference at its import; a later import takes this one
    core = sys.modules.get("pyarrow.parquet.core")
    if core is not None and hasattr(core, "_resolve_filesystem_and_path"):
        core._resolve_filesystem_and_path = pafs._resolve_filesystem_and_path


def register() -> None:
    """Make fsspec's hdfs:// and viewfs:// these, and pyarrow's too (idempotent; pyarrow.dataset,
    pandas, torch's FsspecWriter and Ray Data find them through fsspec)."""
    import fsspec

    for protocol, cls in _classes()[2].items():
        fsspec.register_implementation(protocol, cls, clobber=True)
    _pyarrow_resolves_here()


def filesystem(url: str = "hdfs:///"):
    """The fsspec file system of an hdfs:// or viewfs:// URL (registered first)."""
    register()
    return _of_url(url)


def _of_url(url: str):
    import fsspec

    return fsspec.core.url_to_fs(url)[0]


try:  # `import tony_py.hdfs` is the one line a task needs; without hdfs-native, register() says why
    register()
except ImportError:
    pass
