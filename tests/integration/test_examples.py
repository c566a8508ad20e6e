"""The examples train for real on the cluster, reach >= 90 % accuracy and checkpoint."""

import re

import pytest

from support import PYTHON, ROOT

EXAMPLES = {
    "tf_multi_worker": ("examples/tensorflow", "multi_worker.py", "examples/tensorflow/multi_worker.xml",
                        "worker:0", "digits.index"),
    "tf_parameter_server": ("examples/tensorflow", "parameter_server.py",
                            "examples/tensorflow/parameter_server.xml", "chief:0", "digits.index"),
    "pytorch_ddp": ("examples/pytorch_ddp", "train.py", "examples/pytorch_ddp/tony.xml", "worker:0", "state.pt"),
    "jax_dp": ("examples/jax_dp", "train.py", "examples/jax_dp/tony.xml", "worker:0", "digits-jax.npz"),
}


@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_trains_to_90_percent(name, tony, cluster, tmp_path):
    src, script, conf, chief, checkpoint = EXAMPLES[name]
    ckpt = tmp_path / "ckpt"
    run = tony("--src_dir", str(ROOT / src), "--executes", script, "--python_binary_path", PYTHON,
               "--conf_file", str(ROOT / conf), "--task_params", f"--checkpoint_dir {ckpt}", timeout=480)
    assert run.rc == 0, run.output[-4000:]
    assert "finished: SUCCEEDED" in run.stdout
    logs = cluster.task_logs(run.app_id)
    stdout = logs[chief]["attempt-0.stdout"]
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", stdout).group(1))
    assert accuracy >= 0.90, stdout
    assert list(ckpt.glob(f"*-attempt-0/step-*/{checkpoint}")), sorted(ckpt.rglob("*"))  # tony_py.checkpoint's
    if name == "jax_dp":  # both processes joined one coordinator: each sees both processes' devices
        for i in range(2):
            assert f"process {i} of 2" in logs[f"worker:{i}"]["attempt-0.stdout"]
            assert "2 in all" in logs[f"worker:{i}"]["attempt-0.stdout"]
    # user output and TonY-py's own log are kept apart
    assert "test accuracy" not in logs[chief]["executor.log"]
    assert "tony.executor" not in stdout
