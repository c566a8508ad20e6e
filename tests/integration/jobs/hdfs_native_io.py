"""A task that uses HDFS as training code does, with `import tony_py.hdfs` (hdfs-native: no JVM,
no libhdfs) and nothing else: no keytab, no ticket cache, no configuration of its own.

    hdfs_native_io.py BASE [--forbidden PATH] [--alias-check] [--outlive-tokens]

BASE is an absolute HDFS path; every URL the task opens is `hdfs://` + BASE..., so hdfs:///...,
relative to the fs.defaultFS of the container's HADOOP_CONF_DIR. The task reads BASE/input.txt
through fsspec.open and the Parquet dataset BASE/data through pyarrow.dataset.dataset (a string
URL), opens BASE/missing.txt and PATH (--forbidden: a file its user may not read), writes
BASE/out/<task>.owner (whose owner is the task's user to the NameNode) and reports all of it, as
JSON, in BASE/out/<task>.json (written under a temporary name and renamed).

--alias-check: the container's token file with the copy of the HDFS token under the NameNode's
host:port (tony's TokenAliases) taken out, then a fresh process opens input.txt with it, and one
with the file as it is; both outcomes are reported.
--outlive-tokens: once a renewed token set replaced the container's (the AM renews; the executor
renames each new set over the file), the task waits until a fresh process holding the tokens it
started with is refused, then reads input.txt in a fresh process with the container's file as it
is now, and again with the file system it opened at the start; all three are reported.
"""

import argparse
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import fsspec
import pyarrow.dataset as ds

import tony_py.hdfs

PROBE = ("import sys, fsspec, tony_py.hdfs\n"
         "try:\n    print(fsspec.open(sys.argv[1], 'rb').open().read().decode().strip())\n"
         "except OSError as e:\n    print(f'{type(e).__name__}: {e}'); sys.exit(3)\n")


def failure(url: str) -> dict:
    """What opening url raised (it must raise)."""
    try:
        fsspec.open(url, "rb").open().read()
    except BaseException as exc:  # a Rust panic would be a BaseException: it is reported, not hidden
        return {"type": type(exc).__name__, "errno": getattr(exc, "errno", None),
                "filename": getattr(exc, "filename", None), "text": str(exc)}
    return {"type": None, "text": f"{url} was read"}


def probe(url: str, token_file: str) -> dict:
    """A fresh process (so a fresh hdfs-native connection) reads url with this token file."""
    env = dict(os.environ, HADOOP_TOKEN_FILE_LOCATION=token_file)
    got = subprocess.run([sys.executable, "-c", PROBE, url], env=env, capture_output=True, text=True, timeout=120)
    return {"rc": got.returncode, "out": got.stdout.strip(), "err": got.stderr[-2000:]}


# ---- Hadoop's token storage file (Writable format: what a NodeManager writes) ------------------
def _vint(data: bytes, pos: int) -> tuple[int, int]:
    first = data[pos] - 256 if data[pos] > 127 else data[pos]
    if first >= -112:
        return first, pos + 1
    count = (-120 - first) if first < -120 else (-112 - first)
    value = int.from_bytes(data[pos + 1:pos + 1 + count], "big")
    return (~value if first < -120 else value), pos + 1 + count


def _vint_bytes(value: int) -> bytes:
    if -112 <= value <= 127:
        return bytes([value & 0xFF])
    body = value.to_bytes((value.bit_length() + 7) // 8, "big")
    return bytes([(-112 - len(body)) & 0xFF]) + body


def tokens(data: bytes) -> tuple[list[tuple[bytes, str, str]], bytes]:
    """([(the token's raw record, kind, service)], the secret keys' raw section)."""
    assert data[:5] == b"HDTS\x00", "not a Writable-format token storage file"
    count, pos = _vint(data, 5)
    out = []
    for _ in range(count):
        start, fields = pos, []
        for _field in range(5):  # alias, identifier, password, kind, service
            length, pos = _vint(data, pos)
            fields.append(data[pos:pos + length])
            pos += length
        out.append((data[start:pos], fields[3].decode(), fields[4].decode()))
    return out, data[pos:]


def is_ip_service(service: str) -> bool:
    try:
        ipaddress.ip_address(service.rsplit(":", 1)[0])
        return True
    except ValueError:
        return False


def without_host_alias(token_file: str, target: str) -> list[str]:
    """Write the token file less its HDFS tokens named host:port (the aliases); return every HDFS
    token's service of the original."""
    with open(token_file, "rb") as f:
        records, keys = tokens(f.read())
    kept = [r for r in records if r[1] != "HDFS_DELEGATION_TOKEN" or is_ip_service(r[2])]
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(b"HDTS\x00" + _vint_bytes(len(kept)) + b"".join(r[0] for r in kept) + keys)
    return sorted(r[2] for r in records if r[1] == "HDFS_DELEGATION_TOKEN")


# ---- what the task does ---------------------------------------------------------------------
def outlive_tokens(url: str, token_file: str, fs, path: str, patience_s: float = 300) -> dict:
    started_with = os.path.abspath("tokens-at-start")
    shutil.copyfile(token_file, started_with)
    first = os.stat(token_file).st_ino
    deadline = time.time() + patience_s
    while os.stat(token_file).st_ino == first:  # the executor renames a renewed set over the file
        if time.time() > deadline:
            return {"renewed": False, "waited_s": patience_s}
        time.sleep(0.5)
    renewed_at = time.time()
    while True:  # until the tokens the task started with no longer let a new connection in
        old = probe(url, started_with)
        if old["rc"] or time.time() > deadline:
            break
        time.sleep(2)
    with fs.open(path, "rb") as f:  # the file system opened at the start, with its first connection
        kept = f.read().decode().strip()
    return {"renewed": True, "renewed_after_s": round(renewed_at - START, 1),
            "old_set_refused_after_s": round(time.time() - START, 1),
            "old_set": old, "current_set": probe(url, token_file), "first_connection": kept}


START = time.time()


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("base")
    p.add_argument("--forbidden", default=None)
    p.add_argument("--alias-check", action="store_true")
    p.add_argument("--outlive-tokens", action="store_true")
    args = p.parse_args()
    me = f"{os.environ['JOB_NAME']}-{os.environ['TASK_INDEX']}"
    root = "hdfs://" + args.base
    token_file = os.environ.get("HADOOP_TOKEN_FILE_LOCATION")
    report = {"task": me, "host": socket.getfqdn(), "module": tony_py.hdfs.__file__,
              "hadoop_user_name": os.environ.get("HADOOP_USER_NAME"), "hadoop_conf_dir": bool(os.environ.get("HADOOP_CONF_DIR")), "token_file": bool(token_file)}
    with fsspec.open(f"{root}/input.txt", "rb") as f:
        report["input"] = f.read().decode().strip()
    table = ds.dataset(f"{root}/data", format="parquet").to_table()
    report["rows"], report["sum"] = table.num_rows, sum(table.column("x").to_pylist())
    report["missing"] = failure(f"{root}/missing.txt")
    if args.forbidden:
        report["forbidden"] = failure("hdfs://" + args.forbidden)
    fs = tony_py.hdfs.filesystem(root)
    with fs.open(f"{args.base}/out/{me}.owner", "wb") as f:
        f.write(me.encode())
    report["owner"] = fs.info(f"{args.base}/out/{me}.owner")["owner"]
    if args.alias_check:
        stripped = os.path.abspath("tokens-without-alias")
        report["services"] = without_host_alias(token_file, stripped)
        report["without_alias"] = probe(f"{root}/input.txt", stripped)
        report["with_alias"] = probe(f"{root}/input.txt", token_file)
    if args.outlive_tokens:
        report["outlived"] = outlive_tokens(f"{root}/input.txt", token_file, fs, f"{args.base}/input.txt")
    partial = f"{args.base}/out/.{me}.json.partial"
    with fs.open(partial, "wb") as f:
        f.write(json.dumps(report, indent=1).encode())
    fs.mv(partial, f"{args.base}/out/{me}.json")
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
