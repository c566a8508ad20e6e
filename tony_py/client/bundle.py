"""Build the Python runtime the jar carries (`python -m tony_py.client.bundle OUTDIR`).

tony_py plus the pure-Python (or abi3) packages the client imports, zipped deterministically
(equal content, equal bytes), with its SHA-256 beside it: the jar's driver unpacks it once per
hash. Run by the Maven build, with the interpreter that has the client installed
(`-Dtony.python=…`, default .venv/bin/python).
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

from tony_py.client.staging import package_entries, write_zip

# The task runtime's packages, plus what the client alone needs: the live table (rich and its
# own), HTTP to the ResourceManager's REST API (requests and its own; charset_normalizer's
# compiled modules have pure-Python twins, which other interpreters load). Every third-party
# import the entry modules can reach is here or handled where missing (tests/unit/test_jar_runtime.py).
CLIENT_PACKAGES = ("tony_py", "py4j", "defusedxml", "psutil", "rich", "markdown_it", "mdurl", "pygments",
                   "requests", "urllib3", "idna", "certifi", "charset_normalizer")
JAR_ENTRY_MODULES = ("tony_py.submit", "tony_py.client.notebook")  # what the jar's driver runs
ZIP_NAME = "tony_py_runtime.zip"
HASH_NAME = "tony_py_runtime.sha256"


def build(outdir: Path) -> Path:
    outdir.mkdir(parents=True, exist_ok=True)
    target = outdir / ZIP_NAME
    write_zip(package_entries(CLIENT_PACKAGES), target)
    digest = hashlib.sha256(target.read_bytes()).hexdigest()
    (outdir / HASH_NAME).write_text(digest + "\n")
    return target


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m tony_py.client.bundle OUTDIR")
    print(f"[bundle] {build(Path(sys.argv[1]))}")
