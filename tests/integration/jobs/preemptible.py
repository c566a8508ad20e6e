"""A training stand-in for preemption: each task takes numbered steps, checkpoints every
--ckpt-every steps and, with --checkpoint-on-sigterm, at once on SIGTERM (what TonY-py sends when
YARN announces a preemption) before it exits 0. It resumes from its checkpoint when restarted.

Every step appends one line to <dir>/steps/<task>.jsonl (task, step, gang attempt, container,
RANK and WORLD_SIZE as the task was given them, time); a SIGTERM appends {"sigterm": ...} with the step it checkpointed and the deadline the task
was given (tony_py.task.preemption_deadline). It stops once <dir>/release exists and it has taken
--after-release steps in that gang attempt, or at --max-steps.
"""

import argparse
import json
import os
import signal
import sys
import time


def main():
    import tony_py.task

    p = argparse.ArgumentParser()
    p.add_argument("--dir", required=True)
    p.add_argument("--step-time", type=float, default=0.05)
    p.add_argument("--ckpt-every", type=int, default=1000)
    p.add_argument("--after-release", type=int, default=5)
    p.add_argument("--max-steps", type=int, default=100000)
    p.add_argument("--checkpoint-on-sigterm", action="store_true")
    args = p.parse_args()
    me = os.environ["TONY_TASK_ID"]  # not JOB_NAME:TASK_INDEX, which a smaller gang renumbers
    os.makedirs(f"{args.dir}/steps", exist_ok=True)
    os.makedirs(f"{args.dir}/ckpt", exist_ok=True)
    ckpt = f"{args.dir}/ckpt/{me}.json"
    who = {"task": me, "container": os.environ.get("CONTAINER_ID"), "pid": os.getpid(),
           "attempt": int(os.environ.get("TONY_RESTART_ATTEMPT", "0")), "rank": os.environ.get("RANK"),
           "world": os.environ.get("WORLD_SIZE")}
    log = os.open(f"{args.dir}/steps/{me}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(record):
        os.write(log, (json.dumps({**who, **record, "t": time.time()}) + "\n").encode())

    def save(step):
        with open(f"{ckpt}.{os.getpid()}", "w") as f:
            json.dump({"step": step}, f)
        os.replace(f"{ckpt}.{os.getpid()}", ckpt)

    try:
        with open(ckpt) as f:
            step = json.load(f)["step"]
    except FileNotFoundError:
        step = 0
    write({"resumed_from": step})
    print(f"resumed from checkpoint: step {step}", flush=True)

    def on_sigterm(*_):
        if args.checkpoint_on_sigterm:
            save(step)
        write({"sigterm": step, "checkpointed": args.checkpoint_on_sigterm,
               "deadline": tony_py.task.preemption_deadline()})
        sys.exit(0)

    signal.signal(signal.SIGTERM, on_sigterm)
    after_release = 0
    while step < args.max_steps:
        time.sleep(args.step_time)
        step += 1
        write({"step": step})
        if step % args.ckpt_every == 0:
            save(step)
        if os.path.exists(f"{args.dir}/release"):
            after_release += 1
            if after_release >= args.after_release:
                break
    save(step)
    print(f"done at step {step}", flush=True)


if __name__ == "__main__":
    main()
