"""A task that writes real TensorFlow summaries for the sidecar TensorBoard: worker:0 logs a
scalar `loss` for 20 steps with tf.summary into a local dir, then puts the event file into the
job's TensorBoard log dir on HDFS ($TB_LOG_DIR, with Hadoop's own FsShell: TensorFlow has no HDFS
file system of its own any more); every task records its TensorBoard environment in
OUT/<task>.json and then waits for the release file.

    tb_events.py HADOOP_LIB_DIR RELEASE_FILE OUT
"""

import json
import os
import subprocess
import sys
import tempfile
import time


def main() -> int:
    lib, release, out = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, f"{os.environ['JOB_NAME']}:{os.environ['TASK_INDEX']}.json"), "w") as f:
        json.dump({k: os.environ.get(k) for k in ("TB_LOG_DIR", "TB_PORT", "TF_CONFIG")}, f)
    if os.environ["JOB_NAME"] == "worker" and os.environ["TASK_INDEX"] == "0":
        import tensorflow as tf

        local = tempfile.mkdtemp(prefix="tb-events-", dir=".")
        writer = tf.summary.create_file_writer(local)
        with writer.as_default():
            for step in range(20):
                tf.summary.scalar("loss", 1.0 / (step + 1), step=step)
        writer.close()
        events = [os.path.join(local, name) for name in os.listdir(local) if name.startswith("events.out.tfevents")]
        java = os.path.join(os.environ["JAVA_HOME"], "bin", "java")
        put = subprocess.run([java, "-Xmx128m", "-cp", f"{os.environ['HADOOP_CONF_DIR']}:{lib}/*",
                              "org.apache.hadoop.fs.FsShell", "-put", *events, os.environ["TB_LOG_DIR"]],
                             capture_output=True, text=True)
        if put.returncode:
            print(put.stderr[-3000:], file=sys.stderr)
            return 5
        print(f"wrote {len(events)} event file(s) to {os.environ['TB_LOG_DIR']}", flush=True)
    while not os.path.exists(release):
        time.sleep(0.2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
