"""Faults on real wires for the Docker cluster (docker.py): what the fault tests and
bench/faults.py do to a node, each named for what it means on a real cluster.

- partition / heal: the node's only network is disconnected (`docker network disconnect`); its
  processes keep running, alone, and find every peer unreachable;
- freeze / thaw: every process of the node stops at once (`docker pause`, the cgroup freezer),
  as a machine that hangs, then carries on where it was;
- kill / restart: every process of the node dies at once (`docker kill`), as a power cut;
- cut / uncut: packets between the node and one peer (optionally one port of it) are dropped,
  one iptables rule per direction in the node's own network namespace;
- lose_packets: a fraction of every packet in and out of the node is dropped
  (`iptables -m statistic`; this kernel has no netem), whatever its interface is called.

Each fault and each undoing returns a `Strike`: the time before its `docker` call (the fault
may take effect from then on) and the time the call returned (it is in effect by then). A
loaded machine can take seconds between the two, so a test names the end it means: a copy
that was writing before `started` was struck by the fault; one cut off by it had its lease
renewed no later than `in_effect`. `dropped()` reads the packet counters of the DROP rules, so
a test can show that packets were really dropped.

`damage()` lists what a fault left and `repair()` undoes everything, so a test that failed
half-way does not leave the next one a broken cluster.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Callable

from tony_py.cluster.docker import DockerCluster, docker

CHAINS = ("INPUT", "OUTPUT")  # the node's own firewall chains the packet faults add rules to


@dataclass(frozen=True)
class Strike:
    """When a fault (or its undoing) was done, on this machine's clock (time.time(), the clock
    the Docker cluster's containers share)."""

    started: float  # before the docker call: it may have taken effect from here on
    in_effect: float  # the call returned: in effect from here on, whatever the machine's load


def _timed(action: Callable[[], object]) -> Strike:
    started = time.time()
    action()
    return Strike(started, time.time())


class Faults:
    def __init__(self, cluster: DockerCluster):
        self.cluster = cluster
        state = cluster.load_state()
        if state is None:
            raise RuntimeError(f"no Docker cluster in {cluster.workdir}")
        self.state = state

    def container(self, name: str) -> str:
        return self.state.node(name).container

    def address(self, name: str) -> str:
        return self.state.node(name).address

    # ---- whole nodes -------------------------------------------------------------------------
    def partition(self, name: str) -> Strike:
        return _timed(lambda: docker("network", "disconnect", "--force", self.state.network, self.container(name)))

    def heal(self, name: str) -> Strike:
        return _timed(lambda: docker("network", "connect", "--ip", self.address(name), self.state.network,
                                     self.container(name)))

    def freeze(self, name: str) -> Strike:
        return _timed(lambda: docker("pause", self.container(name)))

    def thaw(self, name: str) -> Strike:
        return _timed(lambda: docker("unpause", self.container(name)))

    def kill(self, name: str) -> Strike:
        """In effect once the container has stopped: `docker kill` returns once the signal is sent,
        `docker wait` once the container is down."""
        def kill_and_wait() -> None:
            docker("kill", self.container(name))
            docker("wait", self.container(name))

        return _timed(kill_and_wait)

    def restart(self, name: str, timeout: float = 120.0) -> None:
        docker("start", self.container(name))
        self.cluster.wait_ready(self.state, time.monotonic() + timeout)

    # ---- packets (NodeManagers only: they alone may change their firewall) ----------------------
    def _iptables(self, name: str, *rule: str, check: bool = True):
        return docker("exec", self.container(name), "/usr/sbin/iptables", "-w", *rule, check=check)

    def cut(self, name: str, peer: str, port: int | None = None) -> Strike:
        """Drop what `name` sends to `peer` (a daemon name or an address), and what it receives
        from it; with `port`, only that port of the peer. In effect once both rules are in."""
        address = self.address(peer) if not peer[0].isdigit() else peer
        to_port = ("-p", "tcp", "--dport", str(port)) if port else ()
        from_port = ("-p", "tcp", "--sport", str(port)) if port else ()

        def both_ways() -> None:
            self._iptables(name, "-A", "OUTPUT", "-d", address, *to_port, "-j", "DROP")
            self._iptables(name, "-A", "INPUT", "-s", address, *from_port, "-j", "DROP")

        return _timed(both_ways)

    def lose_packets(self, name: str, fraction: float) -> Strike:
        """Each packet in or out of the node (loopback aside) is dropped with this chance. No
        interface is named: a node partitioned and healed before comes back on eth1, not eth0."""
        def both_ways() -> None:
            for chain, flag in (("OUTPUT", "-o"), ("INPUT", "-i")):
                self._iptables(name, "-A", chain, "!", flag, "lo", "-m", "statistic", "--mode", "random",
                               "--probability", f"{fraction:.3f}", "-j", "DROP")

        return _timed(both_ways)

    def uncut(self, name: str) -> Strike:
        def flush() -> None:
            for chain in CHAINS:
                self._iptables(name, "-F", chain, check=False)

        return _timed(flush)

    def rules(self, name: str) -> list[str]:
        out = self._iptables(name, "-S", check=False).stdout
        return [line for line in out.splitlines() if line.startswith("-A ")]

    def dropped(self, name: str) -> dict[str, int]:
        """Packets the node's DROP rules have dropped so far, per chain (read it before uncut: a
        flush takes the rules and their counters). A chain without a DROP rule reads 0."""
        return {chain: _dropped_in(self._iptables(name, "-L", chain, "-v", "-n", "-x").stdout) for chain in CHAINS}

    # ---- after a test ------------------------------------------------------------------------
    def damage(self) -> list[str]:
        """What faults left: stopped, frozen or disconnected nodes, firewall rules."""
        found = []
        for name, d in self.cluster.status()["daemons"].items():
            if not d["alive"]:
                found.append(f"{name} stopped")
            elif d["paused"]:
                found.append(f"{name} frozen")
            elif not d["connected"]:
                found.append(f"{name} partitioned")
            elif name.startswith("nodemanager") and self.rules(name):
                found.append(f"{name} has firewall rules")
        return found

    def repair(self, timeout: float = 120.0) -> None:
        """Undo every fault: thaw, heal, flush rules, start what was killed; then wait until the
        cluster is ready again."""
        for name, d in self.cluster.status()["daemons"].items():
            if d["alive"] and d["paused"]:
                self.thaw(name)
            if d["alive"] and not d["connected"]:
                self.heal(name)
            if d["alive"] and name.startswith("nodemanager"):
                self.uncut(name)
            if not d["alive"]:
                docker("start", d["container"])
        self.cluster.wait_ready(self.state, time.monotonic() + timeout)


def _dropped_in(listing: str) -> int:
    """The sum of the packet counters of the DROP rules in `iptables -L CHAIN -v -n -x` output:
    after two header lines, each rule's line starts `pkts bytes target ...`."""
    total = 0
    for line in listing.splitlines()[2:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2] == "DROP":
            if not re.fullmatch(r"\d+", fields[0]):
                raise ValueError(f"unexpected iptables counter line: {line!r}")
            total += int(fields[0])
    return total
