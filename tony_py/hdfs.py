"""`hdfs://` in task code, through hdfs-native (a Rust HDFS client: no JVM, no libhdfs), with
what training code needs that its fsspec file system lacks. Needs `pip install 'tony-py[hdfs]'`
(or `hdfs-native`) in the job's venv; this module itself ships with every task (tony_py is on
each task's PYTHONPATH).

    import tony_py.hdfs                      # once: fsspec's hdfs:// and viewfs:// are these now
    with fsspec.open("hdfs:///data/part-0.parquet", "rb") as f: ...
    torch.save(model.state_dict(), fsspec.open("hdfs:///ckpt/model.pt", "wb").open())
    torch.distributed.checkpoint.save(state, storage_writer=FsspecWriter("hdfs:///ckpt/step-100"))

hdfs-native reads what a task container has: HADOOP_CONF_DIR (fs.defaultFS, NameNode HA,
viewfs mounts, dfs.data.transfer.protection) and, on a secure cluster, the container's
delegation tokens (HADOOP_TOKEN_FILE_LOCATION), which the TonY-py client fetched at submit time,
with a copy under each NameNode's host:port name (hdfs-native picks a token by the literal
address of the URL it opens, Hadoop names them by IP:port); on an insecure cluster it acts as
HADOOP_USER_NAME, which TonY-py sets to the job's user in every task.

What this adds to hdfs-native's own file system:
- readers with `readinto` (`torch.load` and `io.BufferedReader` call it);
- writers with `tell` (torch.distributed.checkpoint's FsspecWriter calls it) and `flush`;
- errors that name the path and HDFS's reason (FileNotFoundError, PermissionError, OSError),
  never a Rust panic or an RPC error's Java stack.
"""

from __future__ import annotations

import errno
import functools
import re

PROTOCOLS = ("hdfs", "viewfs")
_JAVA_EXCEPTION = re.compile(r'RPCError\("([\w.$]+)", "([^"\n\\]*)')
_ERRNO = {FileNotFoundError: errno.ENOENT, PermissionError: errno.EACCES, FileExistsError: errno.EEXIST,
          NotADirectoryError: errno.ENOTDIR}
_BY_JAVA = {"FileNotFoundException": FileNotFoundError, "AccessControlException": PermissionError,
            "FileAlreadyExistsException": FileExistsError, "ParentNotDirectoryException": NotADirectoryError}


def _installed():
    try:
        import fsspec  # noqa: F401
        import hdfs_native.fsspec
    except ImportError as exc:
        raise ImportError("hdfs:// in a task needs hdfs-native in the job's venv: pip install 'tony-py[hdfs]' "
                          f"(or hdfs-native and fsspec) ({exc})") from None
    return hdfs_native


def translate(path: str, exc: BaseException) -> OSError:
    """An hdfs-native failure as the OSError a Python user expects, naming the path and why."""
    if isinstance(exc, OSError) and exc.filename:
        return exc
    text = str(exc)
    m = _JAVA_EXCEPTION.search(text)
    java, reason = (m.group(1).rsplit(".", 1)[-1], m.group(2)) if m else (None, text.splitlines()[0] if text else "")
    kind = _BY_JAVA.get(java) or (type(exc) if isinstance(exc, OSError) else OSError)
    code = _ERRNO.get(kind) or getattr(exc, "errno", None) or errno.EIO
    return kind(code, f"{reason or type(exc).__name__} (HDFS{': ' + java if java else ''})", path)


def _translating(fn):
    @functools.wraps(fn)
    def wrapper(self, path, *args, **kwargs):
        try:
            return fn(self, path, *args, **kwargs)
        except (OSError, RuntimeError, ValueError) as exc:
            raise translate(str(path), exc) from exc
        except BaseException as exc:  # pyo3's PanicException is a BaseException
            if type(exc).__name__ != "PanicException":
                raise
            raise translate(str(path), exc) from exc
    return wrapper


@functools.lru_cache(maxsize=None)
def _classes():
    """The wrapped reader, writer and file systems (made once, on first use: hdfs-native loads then)."""
    hn = _installed()

    class Reader(hn.FileReader):
        def readinto(self, buffer) -> int:
            view = memoryview(buffer).cast("B")
            data = self.read(len(view))
            view[:len(data)] = data
            return len(data)

    class Writer(hn.FileWriter):
        _written = 0  # set per instance by the first write

        def write(self, buf) -> int:
            n = super().write(buf)
            self._written += n
            return n

        def tell(self) -> int:
            return self._written

        def flush(self) -> None:  # data is durable at close (hsync() for earlier); nothing buffered here
            pass

        def seekable(self) -> bool:
            return False

    class Mixin:
        def _open(self, path, mode="rb", **kwargs):
            handle = super()._open(path, mode, **kwargs)
            # the same objects, given the methods they lack (a second wrapper would close the
            # first's stream when the first is collected: IOBase.__del__ closes)
            raw = getattr(handle, "raw", handle)  # a BufferedReader's raw reader when block_size was given
            if type(raw) is hn.FileReader:
                raw.__class__ = Reader
            elif type(handle) is hn.FileWriter:
                handle.__class__ = Writer
            return handle

    for name in ("_open", "info", "ls", "mv", "mkdir", "rm", "rmdir", "du", "touch", "modified"):
        setattr(Mixin, name, _translating(getattr(Mixin, name, None) or getattr(hn.fsspec.BaseFileSystem, name)))

    class HdfsFileSystem(Mixin, hn.fsspec.HdfsFileSystem):
        pass

    class ViewfsFileSystem(Mixin, hn.fsspec.ViewfsFileSystem):
        pass

    return Reader, Writer, {"hdfs": HdfsFileSystem, "viewfs": ViewfsFileSystem}


def register() -> None:
    """Make fsspec's hdfs:// and viewfs:// these (idempotent; pyarrow.dataset, pandas, torch's
    FsspecWriter and Ray Data find them through fsspec)."""
    import fsspec

    for protocol, cls in _classes()[2].items():
        fsspec.register_implementation(protocol, cls, clobber=True)


def filesystem(url: str = "hdfs:///"):
    """The fsspec file system of an hdfs:// or viewfs:// URL (registered first)."""
    import fsspec

    register()
    return fsspec.core.url_to_fs(url)[0]


try:  # `import tony_py.hdfs` is the one line a task needs; without hdfs-native, register() says why
    register()
except ImportError:
    pass
