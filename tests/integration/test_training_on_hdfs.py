"""The examples train for real where the data lives, on the one-host cluster: their data set goes
to HDFS as Parquet with their one-line setup (examples/digits_parquet.py, run here as a user
would, with HADOOP_CONF_DIR and nothing else), then the TensorFlow, PyTorch and JAX examples
train from `--data hdfs:///…` (each task its shard, tony_py.data) to >= 90 % accuracy and commit
their checkpoints to `--checkpoint_dir hdfs:///…` (tony_py.checkpoint). (Their local form, the
README's first job, runs in tests/integration/test_dropin.py; a worker killed mid-training
resuming from its HDFS checkpoint, in test_failures.py.) torch.distributed.checkpoint, torch.save and a committed local directory round-trip
through HDFS from two ranks. What HDFS holds is read back through WebHDFS, not through the code
under test."""

from __future__ import annotations

import json
import re
import subprocess
import uuid

import pytest

from support import JOBS, PYTHON, ROOT, USER

TRAIN_ROWS = 1347  # the digits' 75 % split: 4 files of 337, 337, 337, 336 rows, row groups of 64
EXAMPLES = {  # name: (src, script, conf, chief, checkpoint file, whether each task reads a shard)
    "tf_multi_worker": ("examples/tensorflow", "multi_worker.py", "examples/tensorflow/multi_worker.xml",
                        "worker:0", "digits.index", True),
    "tf_parameter_server": ("examples/tensorflow", "parameter_server.py", "examples/tensorflow/parameter_server.xml",
                            "chief:0", "digits.index", False),
    "pytorch_ddp": ("examples/pytorch_ddp", "train.py", "examples/pytorch_ddp/tony.xml", "worker:0", "state.pt", True),
    "jax_dp": ("examples/jax_dp", "train.py", "examples/jax_dp/tony.xml", "worker:0", "digits-jax.npz", True),
}


@pytest.fixture(scope="module")
def on_hdfs(cluster):
    """A directory of this module's own on HDFS (/user/<user>/…), with the digits put there by
    the examples' setup line; removed afterwards."""
    base = f"/user/{USER}/training-on-hdfs-{uuid.uuid4().hex[:8]}"
    setup = subprocess.run([PYTHON, str(ROOT / "examples/digits_parquet.py"), f"hdfs://{base}/digits"],
                           env=cluster.env(), capture_output=True, text=True, timeout=300)
    assert setup.returncode == 0, setup.stdout + setup.stderr
    assert sorted(cluster.hdfs_list(f"{base}/digits/train")) == [f"part-0000{i}.parquet" for i in range(4)]
    assert cluster.hdfs_list(f"{base}/digits/test") == ["part-00000.parquet"]
    yield base
    cluster.hdfs_delete(base)


def submit_args(name, *params, conf=()):
    src, script, xml, *_ = EXAMPLES[name]
    args = ["--src_dir", str(ROOT / src), "--executes", script, "--python_binary_path", PYTHON,
            "--conf_file", str(ROOT / xml), "--task_params", " ".join(params)]
    for c in conf:
        args += ["--conf", c]
    return args


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_each_example_trains_from_hdfs_data_and_commits_its_checkpoint_there(name, on_hdfs, tony, cluster):
    _, _, _, chief, checkpoint_file, sharded = EXAMPLES[name]
    ckpt = f"{on_hdfs}/ckpt-{name}"
    extra = ["--loader_workers 2"] if name == "pytorch_ddp" else []  # DataLoader's forked workers read HDFS
    run = tony(*submit_args(name, f"--data hdfs://{on_hdfs}/digits", f"--checkpoint_dir hdfs://{ckpt}", *extra),
               timeout=600)
    assert run.rc == 0, run.output[-4000:]
    assert "finished: SUCCEEDED" in run.stdout
    logs = cluster.task_logs(run.app_id)
    stdout = logs[chief]["attempt-0.stdout"]
    assert float(re.search(r"test accuracy: ([0-9.]+)", stdout).group(1)) >= 0.90, stdout
    if sharded:  # both workers read a shard of their own: as many rows each, 673 of the 1347
        shares = [re.search(rf"(\d+) rows of hdfs://{on_hdfs}/digits/train in (\d+) row groups",
                            logs[f"worker:{i}"]["attempt-0.stdout"]) for i in range(2)]
        assert all(shares), {t: logs[t]["attempt-0.stdout"][-2000:] for t in logs}
        assert [int(s.group(1)) for s in shares] == [TRAIN_ROWS // 2] * 2
    # committed under the job's generation, complete, written as the job's user, nothing temporary left
    files = cluster.hdfs_tree(ckpt)
    committed = re.search(r"checkpoint written: hdfs://(\S+)", stdout).group(1)
    step_dir = committed[len(ckpt) + 1:]
    assert step_dir.startswith(f"{run.app_id}-attempt-0/step-"), committed
    assert f"{step_dir}/{checkpoint_file}" in files, sorted(files)
    assert all(not part.startswith("_tmp") for f in files for part in f.split("/")), sorted(files)
    assert {s["owner"] for s in files.values()} == {USER}
    if name == "jax_dp":  # both processes joined one coordinator: each sees both processes' devices
        for i in range(2):
            assert f"process {i} of 2" in logs[f"worker:{i}"]["attempt-0.stdout"]
            assert "2 in all" in logs[f"worker:{i}"]["attempt-0.stdout"]
    # user output and TonY-py's own log are kept apart
    assert "test accuracy" not in logs[chief]["executor.log"]
    assert "tony.executor" not in stdout


def test_dcp_torch_save_and_a_committed_directory_round_trip_through_hdfs(on_hdfs, tony, cluster):
    dest = f"{on_hdfs}/forms"
    run = tony("--src_dir", str(JOBS), "--executes", "checkpoints_on_hdfs.py", "--python_binary_path", PYTHON,
               "--task_params", f"--dest hdfs://{dest}", "--conf", "tony.application.framework=pytorch",
               "--conf", "tony.worker.instances=2", "--conf", "tony.worker.memory=1g", timeout=300)
    assert run.rc == 0, run.output[-4000:]
    logs = cluster.task_logs(run.app_id)
    results = [json.loads(re.search(r"^result (.*)$", logs[f"worker:{i}"]["attempt-0.stdout"], re.M).group(1))
               for i in range(2)]
    generation = f"{run.app_id}-attempt-0"
    for r in results:  # both ranks got rank 0's commit and read back what they wrote
        assert r["dcp"] == r["dcp_loaded"] == f"hdfs://{dest}/dcp/{generation}/step-10" and r["dcp_equal"], r
    zero = results[0]
    assert zero["torch"] == zero["torch_loaded"] == f"hdfs://{dest}/torch/{generation}/step-20"
    assert zero["torch_equal"], zero
    assert zero["committed"] == f"hdfs://{dest}/tf/{generation}/step-30"
    assert zero["fetched"] == {"model.index": "index", "variables/part-0": "values"}
    assert zero["missing"]["filename"] == f"hdfs://{dest}/no-such-data", zero["missing"]
    files = cluster.hdfs_tree(dest)
    assert sorted(files) == sorted([f"dcp/{generation}/step-10/{n}" for n in (".metadata", "__0_0.distcp",
                                                                               "__1_0.distcp")]
                                   + [f"torch/{generation}/step-20/state.pt",
                                      f"tf/{generation}/step-30/model.index",
                                      f"tf/{generation}/step-30/variables/part-0"])
    assert files[f"torch/{generation}/step-20/state.pt"]["length"] > 4 << 20
