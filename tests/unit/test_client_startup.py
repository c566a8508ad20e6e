"""The client's start-up pieces that need no cluster: Hadoop property defaults, when the JVM
starts early, and the timeline marks bench/startup.py reads."""

import json

from tony_py.bridge.gateway import CLIENT_DEFAULTS, client_properties, early_launch
from tony_py.client import timeline

DELAY = "dfs.client.block.write.locateFollowingBlock.initial.delay.ms"


def _site(path, props):
    body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
    path.write_text(f"<configuration>{body}</configuration>")


def test_hdfs_close_retry_defaults_apply_only_where_nothing_sets_them(tmp_path):
    assert client_properties(tmp_path, [], None) == CLIENT_DEFAULTS
    _site(tmp_path / "hdfs-site.xml", {DELAY: "400"})  # the cluster's admin chose: theirs stands
    props = client_properties(tmp_path, [], {"fs.defaultFS": "hdfs://nn:8020"})
    assert DELAY not in props and props["fs.defaultFS"] == "hdfs://nn:8020"
    extra = tmp_path / "job-hdfs.xml"  # tony.application.hdfs-conf-path counts too
    _site(extra, {"dfs.client.block.write.locateFollowingBlock.retries": "3"})
    (tmp_path / "hdfs-site.xml").unlink()
    props = client_properties(tmp_path, [str(extra)], None)
    assert DELAY in props and "dfs.client.block.write.locateFollowingBlock.retries" not in props
    _site(tmp_path / "yarn-site.xml", {"yarn.resourcemanager.connect.max-wait.ms": "900000"})
    assert "yarn.resourcemanager.connect.max-wait.ms" not in client_properties(tmp_path, [], None)
    assert client_properties(tmp_path, [], {DELAY: "7"})[DELAY] == "7"  # --conf / -D wins


def test_no_early_jvm_where_none_is_needed():
    for argv in ([], ["--local", "--executes", "x.py"], ["-local", "-executes", "x.py"], ["--help"], ["-h"]):
        assert early_launch(argv) is None


def test_timeline_marks_only_when_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(timeline.ENV, raising=False)
    timeline.mark("nothing")  # unset: no file anywhere, no error
    path = tmp_path / "t.jsonl"
    monkeypatch.setenv(timeline.ENV, str(path))
    timeline.mark("validated")
    timeline.mark("staged")
    marks = [json.loads(line) for line in path.read_text().splitlines()]
    assert [m["phase"] for m in marks] == ["validated", "staged"] and marks[0]["t"] <= marks[1]["t"]
