"""pyarrow given an hdfs:// or viewfs:// string (pyarrow.dataset.dataset, pyarrow.parquet) after
`import tony_py.hdfs`: it resolves the string to tony_py.hdfs's file system (hdfs-native) instead
of its own HadoopFileSystem (libhdfs and a JVM, which a task has not). The hook is on a private
pyarrow function; this fails first if a pyarrow upgrade moves it. No NameNode is asked: an
hdfs-native client connects on its first call, and none is made here. (That pyarrow.dataset
reads through it from a task: tests/integration/test_hdfs_from_tasks.py.)"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.fs as pafs
import pytest

pytestmark = pytest.mark.unit


@pytest.fixture
def conf_dir(tmp_path, monkeypatch):
    """A client configuration whose fs.defaultFS no NameNode serves (nothing is asked of it)."""
    (tmp_path / "core-site.xml").write_text(
        "<configuration><property><name>fs.defaultFS</name><value>hdfs://127.0.0.1:9</value></property>"
        "</configuration>")
    monkeypatch.setenv("HADOOP_CONF_DIR", str(tmp_path))
    return tmp_path


def test_hdfs_and_viewfs_strings_resolve_to_hdfs_native_and_others_as_before(conf_dir, tmp_path):
    import tony_py.hdfs

    tony_py.hdfs.register()
    resolve = pafs._resolve_filesystem_and_path
    assert getattr(resolve, "tony_hdfs", False), "pyarrow's resolution of strings is not tony_py.hdfs's"
    fs, path = resolve("hdfs:///user/alice/data")
    assert isinstance(fs, pafs.PyFileSystem) and path == "/user/alice/data"
    assert type(fs.handler.fs).__module__ == "tony_py.hdfs" and fs.handler.fs.protocol == "hdfs"
    fs, path = resolve("hdfs://namenode.example:8020/d")
    assert path == "/d" and (fs.handler.fs.host, fs.handler.fs.port) == ("namenode.example", 8020)
    # a local path, and a file system given: pyarrow's own
    fs, path = resolve(str(tmp_path))
    assert isinstance(fs, pafs.LocalFileSystem) and path == str(tmp_path)
    given = pafs.LocalFileSystem()
    with pytest.raises(pa.ArrowInvalid, match="Expected a local filesystem path"):  # pyarrow's own answer
        resolve("hdfs:///x", given)


def test_pyarrow_parquet_takes_the_same_resolution_whenever_it_was_imported(conf_dir):
    import pyarrow.parquet.core as core

    import tony_py.hdfs

    tony_py.hdfs.register()
    tony_py.hdfs.register()  # idempotent: one wrapper, not a wrapper of a wrapper
    assert core._resolve_filesystem_and_path is pafs._resolve_filesystem_and_path
    assert not getattr(pafs._resolve_filesystem_and_path.__wrapped__, "tony_hdfs", False)
