"""TonY's task CLASSPATH on the secure cluster: a JVM the task starts with that CLASSPATH alone, as
libhdfs does, reads alice's HDFS file with nothing but the container's delegation tokens (no
ticket, no keytab in the task). (The insecure cluster's: tests/integration/test_task_classpath.py.)"""

from __future__ import annotations

import json

from support import JOBS, PYTHON

from secure.conftest import FAST


def test_a_jvm_with_only_the_tasks_classpath_reads_hdfs_with_the_containers_tokens(cluster, tony, hdfs_dir, tmp_path):
    base, _ = hdfs_dir
    run = tony("--src_dir", str(JOBS), "--executes", "classpath_read.py", "--python_binary_path", PYTHON,
               "--task_params", f"{base}/input.txt {tmp_path / 'out'}", "--conf", "tony.worker.instances=1", *FAST)
    assert run.rc == 0, run.output[-3000:]
    assert cluster.app(run.app_id)["user"] == "alice"
    record = json.loads((tmp_path / "out" / "worker:0.json").read_text())
    assert record["rc"] == 0 and record["stdout"] == "forty-two\n", record["stderr"]
    assert all("*" not in entry for entry in record["CLASSPATH"].split(":"))
