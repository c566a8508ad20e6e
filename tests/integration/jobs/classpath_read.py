"""What libhdfs does inside a task, without libhdfs: start a JVM whose only classpath is the
task's CLASSPATH (TonY's `hadoop classpath --glob`, tony_py/executor/hadoop_env.py) and read an
HDFS file with it, with the container's delegation tokens where the cluster is secure (the
NodeManager's HADOOP_TOKEN_FILE_LOCATION; UserGroupInformation reads it as libhdfs's JVM would).

    classpath_read.py HDFS_FILE OUT_DIR

writes OUT_DIR/<task>.json: the task's CLASSPATH, JAVA_HOME and HADOOP_CONF_DIR, and the JVM's
exit code, stdout and stderr's tail."""

import json
import os
import subprocess
import sys


def main() -> int:
    path, out_dir = sys.argv[1], sys.argv[2]
    java = os.path.join(os.environ.get("JAVA_HOME", "/nonexistent"), "bin", "java")
    env = {k: v for k, v in os.environ.items() if k in ("CLASSPATH", "HADOOP_TOKEN_FILE_LOCATION", "KRB5_CONFIG",
                                                        "HADOOP_USER_NAME", "PATH", "HOME", "USER")}
    # the realm's krb5.conf as a user gives libhdfs's JVM options (LIBHDFS_OPTS): the JDK does not
    # read MIT's KRB5_CONFIG (a real node has /etc/krb5.conf)
    krb5 = [f"-Djava.security.krb5.conf={os.environ['KRB5_CONFIG']}"] if os.environ.get("KRB5_CONFIG") else []
    run = subprocess.run([java, "-Xmx128m", *krb5, "org.apache.hadoop.fs.FsShell", "-cat", path], env=env,
                         capture_output=True, text=True, timeout=300)
    record = {name: os.environ.get(name) for name in ("CLASSPATH", "JAVA_HOME", "HADOOP_CONF_DIR")}
    record.update(rc=run.returncode, stdout=run.stdout, stderr=run.stderr[-3000:])
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, os.environ["TONY_TASK_ID"] + ".json"), "w") as f:
        json.dump(record, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
