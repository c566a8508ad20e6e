"""`python -m tony_py.cluster up|down|status [--docker [--nodes N] | --secure] [--workdir DIR]`
(also `tony cluster …`). Without --docker every daemon is a process on this machine; with it,
every daemon is a container with its own host name and address. --secure adds a KDC and turns
Kerberos on (either launcher); --ha runs two ResourceManagers that fail over through a
ZooKeeper (either launcher). `status` and `down` find which kind
of cluster a workdir holds by themselves."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tony_py import hadoop_support, paths
from tony_py.cluster.definition import STATE_FILE
from tony_py.cluster.docker import DockerCluster
from tony_py.cluster.processes import LocalCluster
from tony_py.errors import TonyError


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="tony cluster", description="A real local YARN + HDFS cluster: one JVM per daemon on this machine, "
                                         "or (--docker) one container per daemon, each its own host."
    )
    parser.add_argument(
        "action", choices=("up", "down", "status"), help="start, stop or inspect the cluster"
    )
    parser.add_argument("--workdir", help="cluster state, config, data and logs (default "
                        "~/.local/state/tony-py/cluster, with --docker ~/.local/state/tony-py/docker-cluster)")
    parser.add_argument("--docker", action="store_true",
                        help="every daemon in a Docker container with its own host name and address "
                             "(needs a Docker engine and mmdebstrap: scripts/docker-engine)")
    parser.add_argument("--secure", action="store_true",
                        help="Kerberos, a KDC of the cluster's own (realm TONY.TEST; with --docker a container, and "
                             "principals and a keytab per host), SPNEGO on the web UIs, users alice and bob with "
                             "keytabs (needs krb5-user's kinit and ktutil); default workdir "
                             "~/.local/state/tony-py/secure-cluster (with --docker: docker-secure-cluster)")
    parser.add_argument("--ha", action="store_true",
                        help="two ResourceManagers (rm1, rm2) with automatic fail-over through a ZooKeeper of "
                             "their own, as production clusters run them; default workdir ~/.local/state/tony-py/ha-cluster")
    parser.add_argument("--nodes", type=int, default=3, help="with up --docker: how many NodeManagers (default 3)")
    parser.add_argument("--hadoop-version", metavar="VERSION",
                        help="with up: daemons of this Apache Hadoop release, from Maven Central (default: the "
                             "pinned one, " + _pinned() + f"; {hadoop_support.OLDEST} or newer)")
    parser.add_argument("--java-home", metavar="DIR",
                        help="with up (not --docker): the JDK or JRE the daemons run on and the NodeManagers give "
                             "their containers (the AM's JVM), e.g. a Java 11 one (default: this machine's)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--purge", action="store_true", help="with down: also delete the workdir")
    parser.add_argument("--timeout", type=float, default=240.0,
                        help="with up: seconds to wait for the cluster to be ready")
    return parser


def _pinned() -> str:
    try:
        return paths.build_property("hadoop.version")
    except TonyError:
        return "?"


def open_cluster(workdir: str | None, docker: bool, secure: bool = False, ha: bool = False) -> LocalCluster | DockerCluster:
    """The cluster a workdir holds (its cluster.json says which kind), else the kind asked for."""
    kind = "docker" if docker else "processes"
    path = Path(workdir) if workdir else paths.default_cluster_workdir(
        "docker-secure" if secure and docker else "secure" if secure else f"{kind}-ha" if ha and docker else
        "ha" if ha else kind)
    try:
        kind = json.loads((path / STATE_FILE).read_text()).get("kind", "processes")
    except (OSError, ValueError):
        pass
    return DockerCluster(path) if kind == "docker" else LocalCluster(path)


def _print_up(cluster, state, started: bool, info: dict) -> None:
    if started:
        print(f"cluster up in {state.up_seconds:.1f} s (Hadoop {state.hadoop_version}, {cluster.kind}, "
              f"workdir {cluster.workdir})")
    else:
        print(f"cluster already running in {cluster.workdir}")
    if info.get("rm_ids"):
        for rm, web in zip(info["rm_ids"], info["rm_web_addresses"]):
            print(f"  ResourceManager  {web}  {rm}{' (active)' if rm == info.get('active_rm') else ''}")
        print(f"  ZooKeeper        {info['zookeeper']}")
    else:
        print(f"  ResourceManager  {info['resourcemanager_web']}")
    print(f"  NameNode         {info['namenode_web']}")
    if cluster.kind == "docker":
        print(f"  network          {info['network']} {info['subnet']} (internal: nothing leaves this machine)")
        for name, d in info["daemons"].items():
            print(f"  {name:<16} {d['hostname']:<28} {d['address']}")
        print(f"  job Python       {' or '.join(info['python'])}")
        if info.get("hosts_note"):
            print(f"  warning: {info['hosts_note']}")
    print(f"  daemon RSS       {info.get('daemon_rss_mb', {}).get('total', '?')} MB")
    print(f"export HADOOP_CONF_DIR={state.conf_dir}")
    _print_kerberos(info)


def _print_kerberos(info: dict) -> None:
    """A secure cluster: the lines a user runs before submitting."""
    if not info.get("secure"):
        return
    print(f"  Kerberos realm   {info['realm']} (secure: authentication, authorization, RPC privacy)")
    for user, u in info["users"].items():
        print(f"  user {user:<11} {u['principal']}  keytab {u['keytab']}")
    print(f"export KRB5_CONFIG={info['krb5_conf']}")
    print(f"kinit -kt {info['user_keytab']} {info['user_principal']}")


def run(args: argparse.Namespace) -> int:
    if args.action == "up":
        if args.docker:
            default = "docker-ha" if args.ha else "docker-secure" if args.secure else None
            cluster = DockerCluster(args.workdir or (paths.default_cluster_workdir(default) if default else None))
            state, started = cluster.up(nodes=args.nodes, timeout=args.timeout, ha=args.ha, kerberos=args.secure,
                                        log=lambda line: print(line, file=sys.stderr, flush=True),
                                        hadoop_version=args.hadoop_version)
        else:
            workdir = args.workdir or (paths.default_cluster_workdir("secure") if args.secure else
                                       paths.default_cluster_workdir("ha") if args.ha else None)
            cluster = LocalCluster(workdir)
            state, started = cluster.up(timeout=args.timeout, kerberos=args.secure, ha=args.ha,
                                        hadoop_version=args.hadoop_version, java_home=args.java_home)
        info = cluster.status()
        print(json.dumps(info, indent=2)) if args.json else _print_up(cluster, state, started, info)
        return 0
    cluster = open_cluster(args.workdir, args.docker, args.secure, args.ha)
    if args.action == "down":
        stopped = cluster.down(purge=args.purge)
        if args.json:
            print(json.dumps({"stopped": stopped}))
        else:
            print(f"stopped {', '.join(stopped)}" if stopped else "no cluster process was running")
        return 0
    info = cluster.status()
    if args.json:
        print(json.dumps(info, indent=2))
    else:
        print(f"cluster in {info['workdir']} ({info['kind']}): {info['state']}")
        for name, d in info["daemons"].items():
            where = f"{d['hostname']} {d['address']}" if "hostname" in d else f"pid {d['pid']}"
            flags = "DEAD" if not d["alive"] else "PAUSED" if d.get("paused") else \
                "DISCONNECTED" if d.get("connected") is False else "alive"
            print(f"  {name:<16} {where:<40} {flags:<12} {d['log']}")
        if info["state"] != "down":
            print(f"export HADOOP_CONF_DIR={info['hadoop_conf_dir']}")
            _print_kerberos(info)
    return 0 if info["state"] == "running" else 3


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.secure and args.ha:
        print("tony cluster: --ha and --secure together are not supported yet (use one or the other)", file=sys.stderr)
        return 2
    if args.java_home and args.docker:
        print("tony cluster: --java-home is for the process launcher; the Docker cluster's nodes run their image's "
              "JDK", file=sys.stderr)
        return 2
    if args.action == "up" and args.docker and not 1 <= args.nodes <= 50:
        print(f"tony cluster: --nodes must be 1..50, got {args.nodes}", file=sys.stderr)
        return 2
    try:
        return run(args)
    except TonyError as exc:
        print(f"tony cluster: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
