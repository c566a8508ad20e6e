"""The Docker cluster's host names in this machine's /etc/hosts, as DNS gives them on a real
cluster: the client reaches the AM, the NodeManagers' web servers and TensorBoard by the names
YARN reports. One marked block per cluster, replaced by `up` and removed by `down`.
"""

from __future__ import annotations

from pathlib import Path

HOSTS_FILE = Path("/etc/hosts")


def _markers(cluster_id: str) -> tuple[str, str]:
    return f"# tony-py docker cluster {cluster_id} begin", f"# tony-py docker cluster {cluster_id} end"


def without_block(text: str, cluster_id: str) -> str:
    begin, end = _markers(cluster_id)
    out, skipping = [], False
    for line in text.splitlines():
        if line.strip() == begin:
            skipping = True
        elif line.strip() == end and skipping:
            skipping = False
        elif not skipping:
            out.append(line)
    return "\n".join(out) + "\n" if out else ""


def with_block(text: str, cluster_id: str, entries: dict[str, str]) -> str:
    """text with this cluster's block (host name -> address) in place of any earlier one."""
    begin, end = _markers(cluster_id)
    lines = [begin, *(f"{address} {name}" for name, address in entries.items()), end]
    return without_block(text, cluster_id) + "\n".join(lines) + "\n"


def _rewrite(path: Path, text: str) -> None:
    # In place, not by rename: /etc/hosts is often a bind mount (a container's), which a rename
    # cannot replace.
    with open(path, "r+") as f:
        f.seek(0)
        f.write(text)
        f.truncate()


def publish(cluster_id: str, entries: dict[str, str], path: Path = HOSTS_FILE) -> str | None:
    """Add the block; None, or why it could not (then clients on this machine need the lines)."""
    try:
        _rewrite(path, with_block(path.read_text(), cluster_id, entries))
        return None
    except OSError as exc:
        lines = "; ".join(f"{a} {n}" for n, a in entries.items())
        return f"cannot write {path} ({exc.strerror}): add these lines to it yourself: {lines}"


def withdraw(cluster_id: str, path: Path = HOSTS_FILE) -> None:
    try:
        text = path.read_text()
        if _markers(cluster_id)[0] in text:
            _rewrite(path, without_block(text, cluster_id))
    except OSError:
        pass
