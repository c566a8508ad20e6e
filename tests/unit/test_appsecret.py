"""The app secret's ways into a process: a 0600 file (the AM, LocalProcessPort) or the task
container's Hadoop credentials, read from a token file real Hadoop wrote."""

import shutil
from pathlib import Path

import pytest

from tony_py import appsecret
from tony_py.appsecret import CREDENTIALS_ALIAS, SECRET_FILE, TOKEN_FILE_ENV, _Reader, read_secret_key

# Written by Hadoop 3.4.3's Credentials.writeTokenStorageToStream (its default format, what a
# NodeManager writes as a container's token file): one delegation token with a 300-byte
# identifier, a binary key "other.key" and this secret under CREDENTIALS_ALIAS.
HADOOP_TOKENS = Path(__file__).parent / "data" / "hadoop-3.4.3-container-tokens"
SECRET_IN_FILE = "0123456789abcdef" * 4


def test_reads_the_secret_key_hadoop_wrote_among_tokens_and_other_keys():
    assert read_secret_key(HADOOP_TOKENS, CREDENTIALS_ALIAS) == SECRET_IN_FILE.encode()
    assert read_secret_key(HADOOP_TOKENS, "other.key") == b"\x00\x01\x02\xff"
    assert read_secret_key(HADOOP_TOKENS, "tony-py.app-secret.old") is None


@pytest.mark.parametrize("encoded,value", [
    (b"\x00", 0), (b"\x7f", 127), (b"\x90", -112), (b"\xff", -1),
    (b"\x8f\x80", 128), (b"\x8e\x01\x2c", 300), (b"\x87\xc7", -200), (b"\x8c\x7f\xff\xff\xff", 2**31 - 1),
])
def test_hadoop_variable_length_integers(encoded, value):
    assert _Reader(encoded).vint() == value


def test_take_prefers_the_file_and_removes_its_link(tmp_path):
    appsecret.write(tmp_path / SECRET_FILE, "f" * 64)
    assert (tmp_path / SECRET_FILE).stat().st_mode & 0o777 == 0o600
    assert appsecret.take(tmp_path, {TOKEN_FILE_ENV: str(HADOOP_TOKENS)}) == "f" * 64
    assert not (tmp_path / SECRET_FILE).exists()
    # without the file: the container's credentials
    assert appsecret.take(tmp_path, {TOKEN_FILE_ENV: str(HADOOP_TOKENS)}) == SECRET_IN_FILE


def test_take_says_what_is_missing_or_broken(tmp_path):
    with pytest.raises(RuntimeError, match="no tony-secret in the working dir and no HADOOP_TOKEN_FILE_LOCATION"):
        appsecret.take(tmp_path, {})
    without = tmp_path / "no-secret"
    without.write_bytes(b"HDTS\x00\x00\x00")  # no tokens, no keys
    with pytest.raises(RuntimeError, match="holds no tony-py.app-secret"):
        appsecret.take(tmp_path, {TOKEN_FILE_ENV: str(without)})
    data = HADOOP_TOKENS.read_bytes()
    for name, content, words in [("cut", data[:-20], "truncated or corrupt"),
                                 ("other", b"NOPE" + data[4:], "not a Hadoop token storage file"),
                                 ("proto", b"HDTS\x01" + data[5:], "format 1 is not supported")]:
        (tmp_path / name).write_bytes(content)
        with pytest.raises(RuntimeError, match=words):
            appsecret.take(tmp_path, {TOKEN_FILE_ENV: str(tmp_path / name)})
    short = tmp_path / "short"
    shutil.copy(HADOOP_TOKENS, short)
    (tmp_path / SECRET_FILE).write_text("too short")
    with pytest.raises(RuntimeError, match="does not hold a usable secret"):
        appsecret.take(tmp_path, {TOKEN_FILE_ENV: str(short)})
