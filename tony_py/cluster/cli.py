"""`python -m tony_py.cluster up|down|status [--workdir DIR]` (also `tony cluster …`)."""

from __future__ import annotations

import argparse
import json
import sys

from tony_py.cluster.launcher import LocalCluster
from tony_py.errors import TonyError


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        prog="tony cluster", description="A real local YARN + HDFS cluster, one JVM per daemon."
    )
    parser.add_argument(
        "action", choices=("up", "down", "status"), help="start, stop or inspect the cluster"
    )
    parser.add_argument("--workdir", help="cluster state, config, data and logs "
                        "(default ~/.local/state/tony-py/cluster)")
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--purge", action="store_true", help="with down: also delete the workdir")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="with up: seconds to wait for the cluster to be ready")
    return parser


def run(args: argparse.Namespace) -> int:
    cluster = LocalCluster(args.workdir)
    if args.action == "up":
        state, started = cluster.up(timeout=args.timeout)
        info = cluster.status()
        if args.json:
            print(json.dumps(info, indent=2))
        else:
            if started:
                print(f"cluster up in {state.up_seconds:.1f} s (Hadoop {state.hadoop_version}, "
                      f"workdir {cluster.workdir})")
            else:
                print(f"cluster already running in {cluster.workdir}")
            print(f"  ResourceManager  {info['resourcemanager_web']}")
            print(f"  NameNode         {info['namenode_web']}")
            print(f"  daemon RSS       {info.get('daemon_rss_mb', {}).get('total', '?')} MB")
            print(f"export HADOOP_CONF_DIR={state.conf_dir}")
        return 0
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
        print(f"cluster in {info['workdir']}: {info['state']}")
        for name, d in info["daemons"].items():
            print(f"  {name:<16} pid {d['pid']:<8} {'alive' if d['alive'] else 'DEAD'}  {d['log']}")
        if info["state"] != "down":
            print(f"export HADOOP_CONF_DIR={info['hadoop_conf_dir']}")
    return 0 if info["state"] == "running" else 3


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return run(args)
    except TonyError as exc:
        print(f"tony cluster: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
