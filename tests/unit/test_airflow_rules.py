"""The Airflow operator's rules without Airflow (tony_py/airflow/rules.py, follow.py, provider.py):
bad arguments named, which failures Airflow may retry, the task-table lines, where the trigger
looks and the state it carries through the metadata DB. The operator itself runs under real
Airflow in tests/integration/test_airflow.py."""

from __future__ import annotations

import ast
import inspect
import json
import tomllib
from pathlib import Path

import pytest

from tony_py import api
from tony_py.airflow import follow, provider
from tony_py.airflow.rules import (SUBMIT_ARGS, FollowState, check_arguments, job_verdict,
                                   submit_verdict, task_lines)
from tony_py.config.yarnsite import rm_web_urls
from tony_py.errors import ConfigError, SetupError, TonyError, UsageError

ROOT = Path(__file__).resolve().parents[2]


def test_the_operator_takes_exactly_api_submits_keyword_arguments():
    assert {"executes", "src_dir", "conf", "python_binary_path", "local"} <= set(SUBMIT_ARGS)
    # its templated fields (read from operator.py, which needs airflow to import) are all submit's
    tree = ast.parse((ROOT / "tony_py" / "airflow" / "operator.py").read_text())
    fields = next(ast.literal_eval(node.value) for node in ast.walk(tree) if isinstance(node, ast.Assign)
                  and any(getattr(t, "id", None) == "template_fields" for t in node.targets))
    assert fields and set(fields) <= set(inspect.signature(api.submit).parameters)


def test_the_trigger_asks_the_rm_the_job_was_submitted_to_first(tmp_path):
    from tony_py.airflow.rules import rm_urls

    (tmp_path / "yarn-site.xml").write_text(
        "<configuration><property><name>yarn.resourcemanager.webapp.address</name><value>rm1:8088</value>"
        "</property></configuration>")
    assert rm_urls("http://rm9:18088/proxy/application_1_0001/", str(tmp_path)) == ["http://rm9:18088",
                                                                                    "http://rm1:8088"]
    assert rm_urls("http://rm1:8088/proxy/application_1_0001/", str(tmp_path)) == ["http://rm1:8088"]
    assert rm_urls(None, str(tmp_path)) == ["http://rm1:8088"]


def test_only_the_operator_and_the_trigger_import_airflow():
    importers = []
    for path in (ROOT / "tony_py").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            if any(n == "airflow" or n.startswith("airflow.") for n in names):
                importers.append(path.relative_to(ROOT).as_posix())
    assert sorted(set(importers)) == ["tony_py/airflow/operator.py", "tony_py/airflow/trigger.py"]


@pytest.mark.parametrize("args, deferrable, poll, named, allowed", [
    ({"executes": 3}, False, 5, "executes=3", "must be a string"),
    ({"conf": "tony.worker.instances=2"}, False, 5, "conf='tony.worker.instances=2'", "a mapping"),
    ({"shell_env": ["A"]}, False, 5, "shell_env=['A']", "'KEY=VALUE' strings"),
    ({"local": "yes"}, False, 5, "local='yes'", "True or False"),
    ({}, "true", 5, "deferrable='true'", "True or False"),
    ({}, False, 0, "poll_interval=0", "greater than 0"),
    ({}, False, float("nan"), "poll_interval=nan", "greater than 0"),
    ({"local": True}, True, 5, "deferrable=True", "cannot be True with local=True"),
])
def test_a_bad_argument_is_named_with_what_is_allowed(args, deferrable, poll, named, allowed):
    with pytest.raises(UsageError) as err:
        check_arguments("train", args, deferrable, poll)
    assert err.value.exit_code == 2
    assert "TonyOperator(task_id='train')" in str(err.value) and named in str(err.value)
    assert allowed in str(err.value)


def test_good_arguments_pass():
    check_arguments("t", {"executes": "train.py", "src_dir": Path("src"), "conf": {"k": "v"},
                          "shell_env": ["A=1"], "container_env": ("B=2",), "local": True}, False, 0.5)


def cause(kind, exit_code=None):
    return {"root_cause": {"task": "worker:0", "kind": kind, "exit_code": exit_code, "message": "it ended"},
            "final_status": "FAILED", "diagnostics": "TonY-py job FAILED: ..."}


@pytest.mark.parametrize("status, retry", [
    (cause("exit_code", 7), False), (cause("signal"), False), (cause("timeout"), False),
    (cause("infrastructure", -100), True), (cause("preempted", -102), True), (cause("lost"), True),
    (cause("launch"), True), (cause("something-new", -101), True), (cause("something-new", 1), False),
    (cause("exit_code", -100), False),  # a user process's own code, whatever the number
    (cause("exit_code", -104), False),  # over its memory limit: it would be again
    ({"root_cause": {**cause("signal")["root_cause"], "during_preemption_of": "worker:1"}}, True),
])
def test_only_the_infrastructures_failures_are_retried(status, retry):
    verdict = job_verdict("FAILED", status)
    assert not verdict.succeeded and verdict.retry is retry and verdict.exit_code == 1
    assert "worker:0: it ended" in verdict.reason


def test_the_end_without_a_root_cause():
    assert job_verdict("SUCCEEDED", None).succeeded
    killed = job_verdict("KILLED", None, killed_here=True)
    assert not killed.retry and "the task was killed" in killed.reason
    assert not job_verdict("KILLED", None).retry  # someone else killed it: do not run it again
    # the AM decided without a failed task (its own timeout): the job's
    timeout = job_verdict("FAILED", {"final_status": "FAILED", "diagnostics": "TonY-py job FAILED: timed out\nx"})
    assert not timeout.retry and timeout.reason.endswith("TonY-py job FAILED: timed out")
    assert not job_verdict("FAILED", None, "TonY-py job FAILED: application timeout").retry
    # no verdict from the AM at all: its attempts died, the cluster's failure
    am_lost = job_verdict("FAILED", None, "Application failed 2 times due to AM Container exited with exitCode: -100")
    assert am_lost.retry and "exitCode: -100" in am_lost.reason
    assert job_verdict("FAILED", None, "").retry
    assert job_verdict("SUCCEEDED", cause("exit_code", 1), killed_here=True).succeeded  # done before the kill


@pytest.mark.parametrize("error, retry, code", [
    (UsageError("--executes: no such file"), False, 2), (ConfigError("tony.x", "bad"), False, 2),
    (SetupError("HADOOP_CONF_DIR is not set"), False, 2), (TonyError("the RM did not answer"), True, 1),
    (ConnectionRefusedError("refused"), True, 1), (ValueError("a bug"), False, 1),
])
def test_a_failed_submit(error, retry, code):
    verdict = submit_verdict(error)
    assert (verdict.retry, verdict.exit_code) == (retry, code) and str(error) in verdict.reason


def test_task_lines_say_each_change_once():
    seen: dict = {}
    running = {"name": "worker:0", "state": "RUNNING", "attempt": 0, "host": "n1", "log_url": "http://n1/logs",
               "container_id": "c1"}
    assert task_lines(seen, [running]) == ["worker:0       RUNNING    attempt 0 on n1  logs: http://n1/logs"]
    assert task_lines(seen, [running]) == []
    failed = dict(running, state="FAILED", exit_code=7)
    assert task_lines(seen, [failed, {"state": "?"}]) == [
        "worker:0       FAILED     attempt 0 on n1 (exit 7)  logs: http://n1/logs"]


def test_the_resourcemanagers_web_address(tmp_path):
    def site(**props) -> str:
        body = "".join(f"<property><name>{k}</name><value>{v}</value></property>" for k, v in props.items())
        (tmp_path / "yarn-site.xml").write_text(f"<configuration>{body}</configuration>")
        return str(tmp_path)

    assert rm_web_urls(site(**{"yarn.resourcemanager.webapp.address": "0.0.0.0:35283"})) == ["http://localhost:35283"]
    assert rm_web_urls(site(**{"yarn.resourcemanager.hostname": "rm1"})) == ["http://rm1:8088"]
    ha = {"yarn.resourcemanager.ha.enabled": "true", "yarn.resourcemanager.ha.rm-ids": "a,b",
          "yarn.resourcemanager.hostname.a": "m1", "yarn.resourcemanager.webapp.address.b": "m2:9000"}
    assert rm_web_urls(site(**ha)) == ["http://m1:8088", "http://m2:9000"]
    assert rm_web_urls(site(**{"yarn.http.policy": "HTTPS_ONLY", "yarn.resourcemanager.hostname": "r"})) == \
        ["https://r:8090"]


def test_the_trigger_state_survives_the_metadata_db():
    state = FollowState("application_1_0002", ["http://rm:8088"], 2.5, "s" * 64, {"worker:0": ["RUNNING", 0, "c"]})
    again = FollowState.from_kwargs(json.loads(json.dumps(state.to_kwargs())))
    assert again == state and again.to_kwargs() == state.to_kwargs()
    with pytest.raises(ValueError, match="not a YARN application id"):
        FollowState.from_kwargs({"app_id": "job_1", "rm_urls": []})


def test_the_triggers_end_event_carries_only_what_the_operator_needs():
    state = FollowState("application_1_0002", ["http://rm:8088"])
    app = {"state": "FINISHED", "finalStatus": "FAILED", "diagnostics": " TonY-py job FAILED \n"}
    status = {**cause("exit_code", 7), "tasks": [{"name": "worker:0"}], "events": [1, 2], "state": "DONE"}
    event = follow.end_event(state, app, status)
    assert json.loads(json.dumps(event)) == event and follow.done(app)
    assert event["final_status"] == "FAILED" and event["yarn_diagnostics"] == "TonY-py job FAILED"
    assert set(event["am_status"]) == {"state", "final_status", "diagnostics", "root_cause", "restarts_used",
                                       "infra_restarts_used"}
    assert job_verdict(event["final_status"], event["am_status"], event["yarn_diagnostics"]).retry is False
    assert follow.end_event(state, app, None)["am_status"] is None
    assert follow.am_status({"state": "ACCEPTED", "amRPCAddress": "h:1"}, "s") is None  # no AM yet
    assert follow.am_status({"state": "RUNNING", "amRPCAddress": "h:1"}, None) is None  # no secret


def test_the_provider_info_names_this_distribution_and_its_classes():
    info = provider.get_provider_info()
    assert info["package-name"] == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    assert {"name", "description"} <= set(info)
    modules = [m for key in ("operators", "triggers") for entry in info[key] for m in entry["python-modules"]]
    assert modules == ["tony_py.airflow.operator", "tony_py.airflow.trigger"]
    entry_points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    assert entry_points["apache_airflow_provider"] == {"provider_info": "tony_py.airflow.provider:get_provider_info"}
