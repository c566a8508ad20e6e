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


# ---- the AM's job files in its credentials --------------------------------------------------------
def _vint(i: int) -> bytes:
    """Hadoop's WritableUtils.writeVInt, for the token files these tests write."""
    if -112 <= i <= 127:
        return bytes([i & 0xFF])
    first, value = (-120, ~i) if i < 0 else (-112, i)
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes([(first - len(body)) & 0xFF]) + body


def _token_file(path: Path, keys: dict[str, bytes]) -> Path:
    data = b"HDTS\x00" + _vint(0) + _vint(len(keys))
    for alias, value in keys.items():
        data += _vint(len(alias)) + alias.encode() + _vint(len(value)) + value
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("value", [0, 127, -112, -1, 128, 300, -200, 2**31 - 1, 70_000])
def test_the_test_writer_encodes_as_hadoop_reads(value):
    assert _Reader(_vint(value)).vint() == value


def test_the_ams_job_files_come_from_its_credentials_unless_localized(tmp_path):
    from tony_py.am.launch import am_credential_files

    files = {"tony-spec.json": '{"framework": "pytorch"}', "tony-final.xml": "<configuration/>" + "x" * 5000}
    keys = am_credential_files(files)
    assert sorted(keys) == [appsecret.FILE_ALIAS_PREFIX + "tony-final.xml", appsecret.FILE_ALIAS_PREFIX + "tony-spec.json"]
    assert len(keys[appsecret.FILE_ALIAS_PREFIX + "tony-final.xml"]) < 200  # compressed: the RM keeps them
    env = {TOKEN_FILE_ENV: str(_token_file(tmp_path / "tokens", {CREDENTIALS_ALIAS: b"s" * 64, **keys}))}
    work = tmp_path / "work"
    work.mkdir()
    assert {name: appsecret.job_file(name, work, env) for name in files} == files
    assert appsecret.take(work, env) == "s" * 64
    (work / "tony-spec.json").write_text("localized")  # too large for credentials: YARN localized it
    assert appsecret.job_file("tony-spec.json", work, env) == "localized"
    with pytest.raises(RuntimeError, match="tony-job.json is neither in the working dir nor in the container's "
                                           "credentials"):
        appsecret.job_file("tony-job.json", work, env)
    with pytest.raises(RuntimeError, match="no HADOOP_TOKEN_FILE_LOCATION"):
        appsecret.job_file("tony-job.json", work, {})


def test_job_files_too_large_for_credentials_are_left_to_localization():
    import os as _os

    from tony_py.am.launch import AM_CREDENTIAL_FILES_MAX_BYTES, am_credential_files

    assert am_credential_files({"tony-spec.json": "{}" * AM_CREDENTIAL_FILES_MAX_BYTES}) is not None  # compresses
    assert am_credential_files({"tony-spec.json": _os.urandom(AM_CREDENTIAL_FILES_MAX_BYTES).hex()}) is None
