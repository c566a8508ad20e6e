"""Who may hold one of an HTTP server's connections (tony_py/net/httpd.py): two policies.

**The AM's** (`Admission`). Anyone who can reach the AM's port can open sockets to it. A
connection is *unproven* until a request on it proves who sent it (tony_py/am/http/server.py: a
valid signature), and the answer to a request that did not prove itself closes the connection;
so an unproven connection is only ever sending its first request or being answered, and only
proven ones (the executors' and the client's keep-alive channels) stay open between requests.
Then:

- unproven connections share max_connections - reserved slots: the reserved slots are kept by
  proven connections only;
- one peer address holds at most per_peer unproven connections, except the AM's own address:
  on a one-machine cluster (and in local mode) every executor connects from it;
- a newcomer that finds its share full takes the place of the oldest unproven connection that
  has had GRACE_S to send its request and is not being answered (that one is closed); if there
  is none, the newcomer gets 503;
- a proven connection is never displaced: it ends by its idle timeout.

A legitimate client sends its request as soon as it connects, so a socket that stays silent
loses its slot to the next newcomer instead of locking newcomers out.

**An executor's control endpoint's** (`LastSlot`, tony_py/executor/control.py). Its one
legitimate client is a new AM attempt, which sends one notification, once, at fail-over; the cap
is small (8). All slots but the last are anyone's, first come; the last goes to the newest
connection, displacing whoever holds it without having proved itself (a silent or trickling
socket). So however many sockets a stranger holds, the AM's notification always gets a slot,
and once its signature is checked it is not displaced (a newcomer then finds no slot).
"""

from __future__ import annotations

from typing import Protocol

GRACE_S = 0.5  # a request sent at once arrives in milliseconds, even on a busy 2-core node


class Held(Protocol):
    peer: str

    def displaceable(self, now: float, grace_s: float) -> bool: ...

    def displace(self) -> None: ...


class Slots(Protocol):
    """A policy: what HttpServer asks of it, on the loop."""

    def admit(self, conn: Held, now: float) -> bool: ...

    def prove(self, conn: Held) -> None: ...

    def release(self, conn: Held) -> None: ...


class Admission:
    def __init__(self, max_connections: int, own_address: str = ""):
        self.max_connections = max_connections
        self.own_address = own_address
        self.reserved = max_connections // 4
        # a node may run many executors of a job that connect at once: half the unproven share
        self.per_peer = max(8, (max_connections - self.reserved) // 2)
        self.unproven: dict[Held, None] = {}  # oldest first
        self.by_peer: dict[str, dict[Held, None]] = {}
        self.proven: set[Held] = set()

    def admit(self, conn: Held, now: float) -> bool:
        """Give conn a slot, displacing a silent unproven one if need be; False: no slot."""
        peer = self.by_peer.get(conn.peer, {})
        if len(peer) >= self.per_peer and conn.peer != self.own_address and not self._displace(peer, now):
            return False
        full = len(self.unproven) >= self.max_connections - self.reserved \
            or len(self.unproven) + len(self.proven) >= self.max_connections
        if full and not self._displace(self.unproven, now):
            return False
        self.unproven[conn] = None
        self.by_peer.setdefault(conn.peer, {})[conn] = None
        return True

    def prove(self, conn: Held) -> None:
        """A request on conn proved who sent it: it keeps its slot (a reserved one if need be)."""
        if conn in self.unproven:
            self._forget_unproven(conn)
            self.proven.add(conn)

    def release(self, conn: Held) -> None:
        """conn is gone (or displaced); a connection never admitted is ignored."""
        if conn in self.unproven:
            self._forget_unproven(conn)
        self.proven.discard(conn)

    def _forget_unproven(self, conn: Held) -> None:
        del self.unproven[conn]
        peer = self.by_peer[conn.peer]
        del peer[conn]
        if not peer:
            del self.by_peer[conn.peer]

    def _displace(self, candidates: dict[Held, None], now: float) -> bool:
        victim = next((c for c in candidates if c.displaceable(now, GRACE_S)), None)
        if victim is None:
            return False
        self.release(victim)
        victim.displace()
        return True


class LastSlot:
    def __init__(self, max_connections: int):
        self.max_connections = max_connections
        self.shared: set[Held] = set()  # max_connections - 1 slots for anyone
        self.kept: Held | None = None  # the last one: the newest holds it until a signed request keeps it
        self.proven: set[Held] = set()

    def admit(self, conn: Held, now: float) -> bool:
        if len(self.shared) < self.max_connections - 1:
            self.shared.add(conn)
            return True
        if self.kept in self.proven:
            return False  # a signed request is being answered (for milliseconds)
        if self.kept is not None:  # it has not proved itself: it gives way
            victim, self.kept = self.kept, None
            victim.displace()
        self.kept = conn
        return True

    def prove(self, conn: Held) -> None:
        if conn in self.shared or conn is self.kept:
            self.proven.add(conn)

    def release(self, conn: Held) -> None:
        self.shared.discard(conn)
        self.proven.discard(conn)
        if self.kept is conn:
            self.kept = None
