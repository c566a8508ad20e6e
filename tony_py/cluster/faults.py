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
  (`iptables -m statistic`; this kernel has no netem).

`damage()` lists what a fault left and `repair()` undoes everything, so a test that failed
half-way does not leave the next one a broken cluster.
"""

from __future__ import annotations

import time

from tony_py.cluster.docker import DockerCluster, docker


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
    def partition(self, name: str) -> None:
        docker("network", "disconnect", "--force", self.state.network, self.container(name))

    def heal(self, name: str) -> None:
        docker("network", "connect", "--ip", self.address(name), self.state.network, self.container(name))

    def freeze(self, name: str) -> None:
        docker("pause", self.container(name))

    def thaw(self, name: str) -> None:
        docker("unpause", self.container(name))

    def kill(self, name: str) -> None:
        docker("kill", self.container(name))

    def restart(self, name: str, timeout: float = 120.0) -> None:
        docker("start", self.container(name))
        self.cluster.wait_ready(self.state, time.monotonic() + timeout)

    # ---- packets (NodeManagers only: they alone may change their firewall) ----------------------
    def _iptables(self, name: str, *rule: str, check: bool = True):
        return docker("exec", self.container(name), "/usr/sbin/iptables", "-w", *rule, check=check)

    def cut(self, name: str, peer: str, port: int | None = None) -> None:
        """Drop what `name` sends to `peer` (a daemon name or an address), and what it receives
        from it; with `port`, only that port of the peer."""
        address = self.address(peer) if not peer[0].isdigit() else peer
        to_port = ("-p", "tcp", "--dport", str(port)) if port else ()
        from_port = ("-p", "tcp", "--sport", str(port)) if port else ()
        self._iptables(name, "-A", "OUTPUT", "-d", address, *to_port, "-j", "DROP")
        self._iptables(name, "-A", "INPUT", "-s", address, *from_port, "-j", "DROP")

    def lose_packets(self, name: str, fraction: float) -> None:
        """Each packet in or out of the node's network interface is dropped with this chance."""
        for chain, flag in (("OUTPUT", "-o"), ("INPUT", "-i")):
            self._iptables(name, "-A", chain, flag, "eth0", "-m", "statistic", "--mode", "random",
                           "--probability", f"{fraction:.3f}", "-j", "DROP")

    def uncut(self, name: str) -> None:
        for chain in ("INPUT", "OUTPUT"):
            self._iptables(name, "-F", chain, check=False)

    def rules(self, name: str) -> list[str]:
        out = self._iptables(name, "-S", check=False).stdout
        return [line for line in out.splitlines() if line.startswith("-A ")]

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
