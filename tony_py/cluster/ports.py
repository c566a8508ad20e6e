"""The process clusters' ports on this machine: each cluster's daemons keep fixed ports for its
whole life, and no other local cluster may take one of them, even while it is unbound.

A port can be unbound while its cluster still needs it: a standby ResourceManager binds its RPC
ports only when it becomes active, and a daemon restarted with recovery (a NodeManager, an RM)
binds its old ports again. A port that was merely free when a second cluster started could be
that cluster's by then, and the fail-over or the restart fails for good (a standby that cannot
bind stays standby). So every cluster claims its ports in a registry of this user's clusters (a
file per cluster under one lock, in a directory only this user may use) and picks new ones outside every live claim. A claim lives while
its cluster's record lists a running daemon, or for a grace period after it was made (the
daemons are starting); `down` releases it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import random
import socket
import time
from contextlib import contextmanager
from pathlib import Path


from tony_py import paths
from tony_py.cluster.daemons import HOST, DaemonState
from tony_py.cluster.definition import STATE_FILE

PORTS_FROM = 20000  # the daemons' ports: from here up to the ephemeral range (32768 on Linux)
# Beside the clusters' own default workdirs, private to this user (paths.private_dir: a directory
# another user made or may write to is refused, so no one plants links or claims in it).
CLAIMS_DEFAULT = paths.default_cluster_workdir().parent / "port-claims"
CLAIMS = CLAIMS_DEFAULT
CLAIM_GRACE_S = 600.0  # a claim whose cluster has no running daemon yet stays this long


def claim_ports(owner: Path, count: int) -> list[int]:
    """`count` ports for the cluster in `owner` (its workdir), free now and claimed by no other
    live local cluster; recorded as that cluster's claim (replacing an earlier one of it)."""
    owner = Path(owner).resolve()
    with _registry() as claims:
        taken = set()
        for path in claims.glob("*.json"):
            claim = _read(path)
            if claim is None or claim["workdir"] == str(owner) or not _live(claim):
                path.unlink(missing_ok=True)
                continue
            taken.update(claim["ports"])
        ports = free_ports(count, avoid=taken)
        _claim_path(owner).write_text(json.dumps({"workdir": str(owner), "ports": ports, "at": time.time()}))
        return ports


def release_ports(owner: Path) -> None:
    """The cluster in `owner` is down: its ports are anyone's again."""
    with _registry():
        _claim_path(Path(owner).resolve()).unlink(missing_ok=True)


def free_ports(count: int, avoid: set[int] = frozenset()) -> list[int]:
    """Ports free right now on HOST and not in `avoid`, below the kernel's ephemeral range, so
    no outgoing connection takes one while its daemon is down. Sockets stay open until all are
    chosen, so no two match; random, so two clusters started at once rarely try the same."""
    low, _high = _ephemeral_range()
    room = [p for p in range(PORTS_FROM, low) if p not in avoid]
    candidates = random.sample(room, min(len(room), 4 * count + 64)) if len(room) > 4 * count else []
    socks, ports = [], []
    try:
        for port in candidates:
            if len(ports) == count:
                break
            s = socket.socket()
            try:
                s.bind((HOST, port))
            except OSError:
                s.close()
                continue
            socks.append(s)
            ports.append(port)
        while len(ports) < count:  # no room below the ephemeral range: any free port
            s = socket.socket()
            s.bind((HOST, 0))
            if s.getsockname()[1] in avoid:
                s.close()
                continue
            socks.append(s)
            ports.append(s.getsockname()[1])
    finally:
        for s in socks:
            s.close()
    return ports


@contextmanager
def _registry():
    paths.private_dir(CLAIMS)
    with open(CLAIMS / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield CLAIMS
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _claim_path(owner: Path) -> Path:
    return CLAIMS / (hashlib.sha256(str(owner).encode()).hexdigest()[:20] + ".json")


def _read(path: Path) -> dict | None:
    try:
        claim = json.loads(path.read_text())
        return claim if isinstance(claim.get("ports"), list) and isinstance(claim.get("workdir"), str) else None
    except (OSError, ValueError, AttributeError):
        return None


def _live(claim: dict) -> bool:
    if time.time() - float(claim.get("at", 0)) < CLAIM_GRACE_S:
        return True
    try:
        daemons = json.loads((Path(claim["workdir"]) / STATE_FILE).read_text()).get("daemons") or []
    except (OSError, ValueError, AttributeError):
        return False
    try:
        return any(DaemonState(**d).process() is not None for d in daemons)
    except TypeError:  # (a record this version does not read)
        return False


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999
