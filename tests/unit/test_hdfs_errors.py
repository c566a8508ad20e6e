"""What task code sees when HDFS says no (tony_py/hdfs.py): an OSError of the kind Python code
expects, with its errno, naming the path and HDFS's reason, from the forms hdfs-native raises
(its RPCError text with the Java exception's class and message; a FileNotFoundError; a Rust
panic, which pyo3 raises as a BaseException)."""

from __future__ import annotations

import errno

import pytest

from tony_py.hdfs import translate

pytestmark = pytest.mark.unit

DENIED = ('RPCError("org.apache.hadoop.security.AccessControlException", "Permission denied: user=mallory, '
          'access=READ, inode=\\"/user/alice/data\\":alice:alice:drwx------\\n\\tat org.apache.hadoop...")')


@pytest.mark.parametrize("raised,kind,code,words", [
    (RuntimeError(DENIED), PermissionError, errno.EACCES, "Permission denied: user=mallory, access=READ"),
    (RuntimeError('RPCError("java.io.FileNotFoundException", "File does not exist: /x")'), FileNotFoundError,
     errno.ENOENT, "File does not exist: /x"),
    (FileNotFoundError("File does not exist: /x"), FileNotFoundError, errno.ENOENT, "File does not exist: /x"),
    (RuntimeError('RPCError("org.apache.hadoop.fs.FileAlreadyExistsException", "/x for client exists")'),
     FileExistsError, errno.EEXIST, "/x for client exists"),
    (RuntimeError("All DataNodes failed"), OSError, errno.EIO, "All DataNodes failed"),
])
def test_an_hdfs_failure_is_the_oserror_python_code_expects_naming_the_path(raised, kind, code, words):
    error = translate("/user/alice/data/part-0.parquet", raised)
    assert type(error) is kind and error.errno == code
    assert error.filename == "/user/alice/data/part-0.parquet" and words in error.strerror
    assert "\tat " not in str(error)  # the Java stack stays out
