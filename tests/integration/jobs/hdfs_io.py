"""A task that reads and writes HDFS with nothing but its container's delegation tokens (the
NodeManager's HADOOP_TOKEN_FILE_LOCATION, read afresh by each `hdfs dfs`): no keytab, and a
ticket cache that cannot exist.

    hdfs_io.py LIB DIR [--rounds N --every S] [--die-in-round R | --die-when FILE] [--rounds-after-restart M]
               [--hold-while FILE] [--token-copies LOCAL_DIR]

reads DIR/input.txt, then N times (S seconds apart, each round starting once the last one's
write returned) writes DIR/out/<task>-a<attempt>-r<round>.txt (N=1: DIR/out/<task>.txt).
In its first attempt it kills itself with SIGKILL in round R (--die-in-round), or before the
first round that finds FILE there (--die-when: whoever watches the job decides when, on an
event it saw). The other options, for that watcher too (FILE and LOCAL_DIR are local paths):
--hold-while: no round starts while FILE is there, and the task says it waits by creating
FILE.<task>. --token-copies: a copy of the token file as each write starts,
LOCAL_DIR/<output name>.tokens (0600); the write reads that set or a later one (the executor
installs renewed sets by a rename; the write reads the file itself, a JVM's start later, as a
user's process would).
"""

import argparse
import os
import signal
import subprocess
import sys
import time


def copy_tokens(token_file: str, target: str) -> None:
    """One read of the token file (the executor replaces it by a rename: this sees one whole set),
    written beside target and renamed onto it, so a reader never sees half a copy."""
    with open(token_file, "rb") as f:
        data = f.read()
    partial = target + ".partial"
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)
    os.replace(partial, target)


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("lib")
    p.add_argument("base")
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--every", type=float, default=0)
    p.add_argument("--die-in-round", type=int, default=-1)
    p.add_argument("--die-when", default=None, help="a local file: die before the first round that finds it")
    p.add_argument("--rounds-after-restart", type=int, default=None)
    p.add_argument("--hold-while", default=None, help="a local file: no round starts while it is there")
    p.add_argument("--token-copies", default=None, help="a local dir for a copy of the tokens of each write")
    args = p.parse_args()
    me = f"{os.environ['JOB_NAME']}-{os.environ['TASK_INDEX']}"
    attempt = os.environ.get("TONY_RESTART_ATTEMPT", "0")
    env = dict(os.environ, KRB5CCNAME="FILE:/nonexistent/tony-no-ticket")
    java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
    cmd = [java, "-Xmx128m", "-cp", f"{os.environ['HADOOP_CONF_DIR']}:{args.lib}/*", "org.apache.hadoop.fs.FsShell"]
    token_file = os.environ.get("HADOOP_TOKEN_FILE_LOCATION")
    if not token_file:
        print("no HADOOP_TOKEN_FILE_LOCATION in the task's environment", file=sys.stderr)
        return 6
    got = subprocess.run(cmd + ["-cat", f"{args.base}/input.txt"], env=env, capture_output=True, text=True)
    if got.returncode:
        print(got.stderr[-3000:], file=sys.stderr)
        return 5
    rounds = args.rounds if attempt == "0" or args.rounds_after_restart is None else args.rounds_after_restart
    for n in range(rounds):
        if args.hold_while and os.path.exists(args.hold_while):
            with open(f"{args.hold_while}.{me}", "w"):
                pass
            while os.path.exists(args.hold_while):
                time.sleep(0.2)
        due = n == args.die_in_round or (args.die_when is not None and os.path.exists(args.die_when))
        if due and attempt == "0":
            os.kill(os.getpid(), signal.SIGKILL)
        name = f"{me}.txt" if args.rounds == 1 else f"{me}-a{attempt}-r{n}.txt"
        if args.token_copies:
            copy_tokens(token_file, os.path.join(args.token_copies, name[:-len(".txt")] + ".tokens"))
        put = subprocess.run(cmd + ["-put", "-", f"{args.base}/out/{name}"], input=f"{me} read {got.stdout.strip()}\n",
                             env=env, capture_output=True, text=True)
        if put.returncode:
            print(f"round {n} at {time.strftime('%H:%M:%S')}: {put.stderr[-3000:]}", file=sys.stderr)
            return 7
        print(f"{me}: round {n} written at {time.strftime('%H:%M:%S')}", flush=True)
        if n < rounds - 1:
            time.sleep(args.every)
    return 0


if __name__ == "__main__":
    sys.exit(main())
