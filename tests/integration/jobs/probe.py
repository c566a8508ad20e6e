"""A task script for integration tests: records what TonY-py gave this task, then behaves as
told (exit code, stderr, sleeping) so tests can drive TonY's success/failure rules."""

import argparse
import atexit
import json
import os
import subprocess
import sys
import time
from pathlib import Path

VARS = (
    "JOB_NAME TASK_INDEX TASK_NUM JOB_ID appid DISTRIBUTED_MODE IS_CHIEF AM_HOST AM_PORT TB_PORT "
    "CLUSTER_SPEC TF_CONFIG INIT_METHOD RANK WORLD MASTER_ADDR MASTER_PORT WORLD_SIZE LOCAL_RANK "
    "MALLOC_ARENA_MAX TONY_APP_SECRET TONY_RESTART_ATTEMPT TONY_ERROR_FILE PYTHONPATH NM_HOST NM_PORT "
    "PROBE_SHELL_ENV PROBE_CONTAINER_ENV CLASSPATH"
).split()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, help="directory for <task>.json")
    p.add_argument("--fail", default="", help="task:code[,task:code] to exit with (a negative code: die by that signal)")
    p.add_argument("--sleep", default="", help="task:seconds[,...] to sleep before exiting ('*' = every task)")
    p.add_argument("--forever", default="", help="comma-separated tasks that never exit by themselves")
    p.add_argument("--progress", action="store_true", help="report progress every 0.5 s while waiting")
    p.add_argument("--hang", default="", help="comma-separated tasks that block forever without progress")
    p.add_argument("--spawn", default="", help="comma-separated tasks that start a `sleep` grandchild")
    p.add_argument("--until-file", default="", help="wait (forever) until this file exists, then go on")
    p.add_argument("--huge-error", default="", help="comma-separated tasks that write a 2 MB error file and exit 3")
    p.add_argument("--marker", default="", help="recorded as is (tells which command ran)")
    p.add_argument("--serve-tb", action="store_true", help="the task with TB_PORT serves HTTP on it (a stand-in TensorBoard)")
    p.add_argument("--print-every", type=float, default=0, help="print a numbered line this often while waiting")
    p.add_argument("--burn", action="store_true", help="hold 64 MB and keep a core busy while waiting")
    p.add_argument("--hold", default="", help="task:MB[,...] to hold resident (every page written) while waiting")
    p.add_argument("--once", action="store_true", help="--fail only in the first gang attempt")
    p.add_argument("--first-attempts", type=int, default=0, help="--fail only in the first N gang attempts")
    p.add_argument("--after-record", default="", help="comma-separated tasks whose record must exist before going on")
    p.add_argument("--after-end", default="",
                   help="comma-separated other tasks that must have ended (by themselves, in this gang attempt) first")
    args = p.parse_args()
    me = f"{os.environ['JOB_NAME']}:{os.environ['TASK_INDEX']}"
    record = {k: os.environ.get(k) for k in VARS}
    record["started_at"] = time.time()
    record["all_env"] = dict(os.environ)
    record["argv"] = sys.argv[1:]
    record["cwd_files"] = sorted(os.listdir("."))
    record["cwd_dirs"] = sorted(n for n in os.listdir(".") if os.path.isdir(n))
    record["pid"] = os.getpid()
    if me in args.spawn.split(","):
        record["grandchild_pid"] = subprocess.Popen(["sleep", "600"]).pid
    record["executable"] = sys.executable
    record["venv_realpath"] = os.path.realpath("venv") if os.path.exists("venv") else None
    try:
        import tony_py.task

        record["tony_py_task_file"] = tony_py.task.__file__
    except ImportError:
        record["tony_py_task_file"] = None
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"{me}.json")

    def save():
        with open(path + ".tmp", "w") as f:
            json.dump(record, f)
        os.replace(path + ".tmp", path)

    def finished():  # when it exits by itself (a normal end or a sys.exit), not when it is killed
        record["ended_at"] = time.time()
        save()

    save()
    atexit.register(finished)
    print(f"probe {me} started", flush=True)
    for other in filter(None, args.after_record.split(",")):  # an order of events, not a race of sleeps
        while not os.path.exists(os.path.join(args.out, f"{other}.json")):
            time.sleep(0.05)
    for other in filter(None, args.after_end.split(",")):
        while other != me and not ended_in_this_attempt(os.path.join(args.out, f"{other}.json")):
            time.sleep(0.05)

    def lookup(spec):
        for item in filter(None, spec.split(",")):
            task, _, value = item.rpartition(":")
            if task in (me, "*"):
                return value
        return None

    if args.serve_tb and os.environ.get("TB_PORT"):
        import http.server
        import threading

        server = http.server.ThreadingHTTPServer((os.environ["NM_HOST"], int(os.environ["TB_PORT"])),
                                                 http.server.SimpleHTTPRequestHandler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
    ballast = bytearray(b"\x01" * (64 << 20)) if args.burn else None  # resident, not just reserved
    held = bytearray(int(lookup(args.hold) or 0) << 20)
    held[::4096] = b"\x01" * (len(held) // 4096)  # a write on every page: resident, not just reserved
    record["held_mb"] = len(held) >> 20
    lines = [0]

    def wait(seconds):
        deadline = time.monotonic() + seconds
        next_line = time.monotonic()
        while time.monotonic() < deadline and not (args.until_file and os.path.exists(args.until_file)):
            if args.progress:
                Path(os.environ["TONY_PROGRESS_FILE"]).touch()
            if args.print_every and time.monotonic() >= next_line:
                lines[0] += 1
                print(f"line {lines[0]}", flush=True)
                next_line = time.monotonic() + args.print_every
            if args.burn:
                end = time.monotonic() + 0.45
                while time.monotonic() < end:
                    ballast[lines[0] % len(ballast)] = 1
                time.sleep(0.05)
            else:
                time.sleep(0.1 if args.print_every else 0.5)

    if me in args.huge_error.split(","):
        with open(os.environ["TONY_ERROR_FILE"], "w") as f:
            json.dump({"type": "HugeError", "message": "m" * 2_000_000, "traceback": "t" * 100}, f)
        sys.exit(3)
    if args.until_file:
        wait(float("inf"))
    if me in args.hang.split(","):
        while True:
            time.sleep(1)
    if me in args.forever.split(","):
        wait(float("inf"))
    seconds = lookup(args.sleep)
    if seconds:
        wait(float(seconds))
    code = lookup(args.fail)
    attempt = int(os.environ.get("TONY_RESTART_ATTEMPT", "0"))
    if code and (args.once and attempt != 0 or args.first_attempts and attempt >= args.first_attempts):
        code = None
    if code and int(code) < 0:
        print(f"probe {me} killing itself with signal {-int(code)}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), -int(code))
    if code:
        print(f"probe {me} failing on purpose with exit code {code}", file=sys.stderr, flush=True)
        sys.exit(int(code))
    print(f"probe {me} done", flush=True)


def ended_in_this_attempt(path: str) -> bool:
    try:
        with open(path) as f:
            other = json.load(f)
    except (OSError, ValueError):
        return False
    return "ended_at" in other and other.get("TONY_RESTART_ATTEMPT") == os.environ.get("TONY_RESTART_ATTEMPT")


if __name__ == "__main__":
    main()
