"""The per-application secret that authenticates executors (and a new AM attempt) to the AM.

The client generates it. It reaches each process without ever being an environment variable
(YARN copies each container's launch script, environment included, into its logs):
- the AM: in its container's credentials, like a task container's below (the client adds it to
  the AM's launch context, beside the AM's own job files under FILE_ALIAS_PREFIX: am/main.py);
- a task container on YARN: the AM puts it into the container's credentials, which the
  NodeManager writes to the container's token file (HADOOP_TOKEN_FILE_LOCATION, the job
  user's only) as it launches the container. No localization: a task container needs no file
  of this job from HDFS (the executor fetches the rest from the AM, signed), so a node starts
  it without running a localizer;
- a process started by LocalProcessPort (single-node job, local mode): a file in its working
  dir, created 0600 by the port.
Whoever reads the file (the AM, an executor) removes the link from the working dir, so the
user process does not find it lying around either.
"""

from __future__ import annotations

import os
from pathlib import Path

SECRET_FILE = "tony-secret"
# The secret key's alias in a task container's credentials (the AM hands it to AmBridge.start).
CREDENTIALS_ALIAS = "tony-py.app-secret"
TOKEN_FILE_ENV = "HADOOP_TOKEN_FILE_LOCATION"
# The AM's job files (the spec, tony-final.xml, tony-job.json), zlib-compressed, as secret keys of
# its credentials: no localizer on the AM's start (AmBridge.java keeps them out of task containers).
FILE_ALIAS_PREFIX = "tony-py.file."


def generate() -> str:
    import secrets  # the client's business; executors only read (secrets imports random: ~3 ms each)

    return secrets.token_hex(32)


def write(path: Path, value: str) -> None:
    """Create a secret file readable by its owner only, atomically with its mode (O_EXCL: never
    through an existing file or link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(value)


def take(cwd: Path | None = None, env: dict | None = None) -> str:
    """The secret: from its file in the working dir (whose link is then removed), else from the
    container's credentials."""
    path = (cwd or Path.cwd()) / SECRET_FILE
    try:
        value = path.read_text().strip()
    except FileNotFoundError:
        token_file = (os.environ if env is None else env).get(TOKEN_FILE_ENV)
        if not token_file:
            raise RuntimeError(f"no {SECRET_FILE} in the working dir and no {TOKEN_FILE_ENV}: "
                               "this process was not started by a TonY-py AM") from None
        where = token_file
        secret = read_secret_key(Path(token_file), CREDENTIALS_ALIAS)
        if secret is None:
            raise RuntimeError(f"{token_file} holds no {CREDENTIALS_ALIAS} secret") from None
        value = secret.decode()
    else:
        where = str(path)
        try:
            path.unlink()
        except OSError:
            pass
    if len(value) < 32:
        raise RuntimeError(f"{where} does not hold a usable secret")
    return value


def job_file(name: str, cwd: Path | None = None, env: dict | None = None) -> str:
    """One of the AM's job files: from the working dir when YARN localized it there (files too
    large for credentials), else from the container's credentials."""
    path = (cwd or Path.cwd()) / name
    if path.exists():
        return path.read_text()
    token_file = (os.environ if env is None else env).get(TOKEN_FILE_ENV)
    blob = read_secret_key(Path(token_file), FILE_ALIAS_PREFIX + name) if token_file else None
    if blob is None:
        raise RuntimeError(f"{name} is neither in the working dir nor in the container's credentials "
                           f"({token_file or 'no ' + TOKEN_FILE_ENV}): this process was not started by a "
                           "TonY-py client")
    import zlib  # the AM's only

    return zlib.decompress(blob).decode()


# ---- Hadoop's token storage file -------------------------------------------------------------
# Written by Credentials.writeTokenStorageToStream in its default WRITABLE format, what a
# NodeManager writes for every container (Hadoop 2 and the 3.x releases this jar runs on; only
# 3.0.0's pre-releases defaulted to the protobuf format 1, which is refused by name):
#   "HDTS", version byte 0, vint #tokens, then per token: Text alias, bytes identifier,
#   bytes password, Text kind, Text service; vint #secret keys, then per key: Text alias,
#   bytes value. Text and bytes are a vint length and that many bytes; a vint is Hadoop's
#   WritableUtils variable-length integer. No Python library reads this; the format is small
#   and frozen (Hadoop must read files older releases wrote), so it is read here, and checked
#   against a file real Hadoop wrote (tests/unit/data).
TOKEN_STORAGE_MAGIC = b"HDTS"
WRITABLE_FORMAT = 0


class _Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def byte(self) -> int:
        if self.pos >= len(self.data):
            raise ValueError("truncated")
        self.pos += 1
        return self.data[self.pos - 1]

    def vint(self) -> int:
        first = self.byte()
        first = first - 256 if first > 127 else first
        if first >= -112:
            return first
        negative = first < -120
        count = (-120 - first) if negative else (-112 - first)
        value = 0
        for _ in range(count):
            value = (value << 8) | self.byte()
        return ~value if negative else value

    def blob(self) -> bytes:
        length = self.vint()
        if length < 0 or self.pos + length > len(self.data):
            raise ValueError("truncated")
        self.pos += length
        return self.data[self.pos - length:self.pos]


def read_secret_key(path: Path, alias: str) -> bytes | None:
    """The secret key stored under alias in a Hadoop token storage file, or None."""
    return read_secret_keys(path).get(alias)


def read_secret_keys(path: Path) -> dict[str, bytes]:
    """Every secret key of a Hadoop token storage file, by alias."""
    data = path.read_bytes()
    if not data.startswith(TOKEN_STORAGE_MAGIC):
        raise RuntimeError(f"{path} is not a Hadoop token storage file")
    r = _Reader(data)
    r.pos = len(TOKEN_STORAGE_MAGIC)
    try:
        version = r.byte()
        if version != WRITABLE_FORMAT:
            raise RuntimeError(f"{path}: token storage format {version} is not supported (only Hadoop's "
                               f"default, {WRITABLE_FORMAT})")
        for _ in range(r.vint()):
            for _field in range(5):  # alias, identifier, password, kind, service
                r.blob()
        keys = {}
        for _ in range(r.vint()):
            name, value = r.blob(), r.blob()
            keys[name.decode()] = value
    except (ValueError, UnicodeDecodeError):
        raise RuntimeError(f"{path} is a truncated or corrupt token storage file") from None
    return keys
