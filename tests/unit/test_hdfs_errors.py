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


NO_CRED = ('GSSAPIError(GssMajorCodes { raw: "0x00070000", calling_error: "none", routine_error: "GSS_S_NO_CRED", '
           'supplementary_info: "0x0000" }, 2529639053, "No credentials were supplied, or the credentials were '
           'unavailable or inaccessible: No Kerberos credentials available (default cache: FILE:/nonexistent/cc)")')


def test_no_token_for_the_namenode_and_no_ticket_says_what_was_looked_for(monkeypatch):
    """hdfs-native looks for a token under the NameNode's address as the URL names it, skips one
    that dies within 60 s, then tries Kerberos, which a task container has no ticket for."""
    monkeypatch.setenv("HADOOP_TOKEN_FILE_LOCATION", "/nm/container_1/container_tokens")
    error = translate("/user/alice/data", RuntimeError(NO_CRED))
    assert type(error) is PermissionError and error.errno == errno.EACCES and error.filename == "/user/alice/data"
    assert error.strerror.startswith("no credentials for HDFS: no HDFS delegation token in "
                                     "HADOOP_TOKEN_FILE_LOCATION (/nm/container_1/container_tokens) under this "
                                     "NameNode's address as the URL names it"), error.strerror
    monkeypatch.delenv("HADOOP_TOKEN_FILE_LOCATION")
    assert "no HADOOP_TOKEN_FILE_LOCATION, and no Kerberos ticket" in translate("/d", RuntimeError(NO_CRED)).strerror
