"""A task that reads and writes HDFS with nothing but its container's delegation tokens (the
NodeManager's HADOOP_TOKEN_FILE_LOCATION, read afresh by each `hdfs dfs`): no keytab, and a
ticket cache that cannot exist.

    hdfs_io.py LIB DIR [--rounds N --every S] [--die-in-round R | --die-after EPOCH:K] [--rounds-after-restart M]

reads DIR/input.txt, then N times (S seconds apart) writes DIR/out/<task>-a<attempt>-r<round>.txt
(N=1: DIR/out/<task>.txt); --die-in-round kills itself with SIGKILL in that round of its first
attempt, --die-after once K rounds that started at or after EPOCH were written (so they are
there however slowly a loaded machine runs them; then a restart, whose new containers need live
tokens to start at all).
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("lib")
    p.add_argument("base")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--every", type=float, default=0)
    p.add_argument("--die-in-round", type=int, default=-1)
    p.add_argument("--die-after", default=None, help="EPOCH:K")
    p.add_argument("--rounds-after-restart", type=int, default=None)
    args = p.parse_args()
    me = f"{os.environ['JOB_NAME']}-{os.environ['TASK_INDEX']}"
    attempt = os.environ.get("TONY_RESTART_ATTEMPT", "0")
    env = dict(os.environ, KRB5CCNAME="FILE:/nonexistent/tony-no-ticket")
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    cmd = [java, "-Xmx128m", "-cp", f"{os.environ['HADOOP_CONF_DIR']}:{args.lib}/*", "org.apache.hadoop.fs.FsShell"]
    if not os.environ.get("HADOOP_TOKEN_FILE_LOCATION"):
        print("no HADOOP_TOKEN_FILE_LOCATION in the task's environment", file=sys.stderr)
        return 6
    got = subprocess.run(cmd + ["-cat", f"{args.base}/input.txt"], env=env, capture_output=True, text=True)
    if got.returncode:
        print(got.stderr[-3000:], file=sys.stderr)
        return 5
    rounds = args.rounds if attempt == "0" or args.rounds_after_restart is None else args.rounds_after_restart
    since, after = (float(args.die_after.split(":")[0]), int(args.die_after.split(":")[1])) if args.die_after \
        else (None, 0)
    written_since = 0
    for n in range(rounds):
        due = n == args.die_in_round or (since is not None and written_since >= after)
        if due and attempt == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        started = time.time()
        name = f"{me}.txt" if args.rounds == 1 else f"{me}-a{attempt}-r{n}.txt"
        put = subprocess.run(cmd + ["-put", "-", f"{args.base}/out/{name}"], input=f"{me} read {got.stdout.strip()}\n",
                             env=env, capture_output=True, text=True)
        if put.returncode:
            print(f"round {n} at {time.strftime('%H:%M:%S')}: {put.stderr[-3000:]}", file=sys.stderr)
            return 7
        print(f"{me}: round {n} written at {time.strftime('%H:%M:%S')}", flush=True)
        written_since += since is not None and started >= since
        time.sleep(args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
