"""TonyOperator: a TonY-py job as an Airflow task (what Azkaban's TonY jobtype was, for Airflow).

It takes api.submit's keyword arguments, submits, writes the task table's changes and, on
failure, the root cause into the task log, pushes `app_id` and `final_status` to XCom (and
returns the app id), kills the application in on_kill, and fails so that Airflow retries only
what the infrastructure failed (tony_py/airflow/rules.py decides). With deferrable=True the
worker slot is given back after the submit and TonyTrigger follows the job from the triggerer.
"""

from __future__ import annotations

import time
from typing import Any

from airflow.sdk import BaseOperator, conf
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from tony_py import api
from tony_py.airflow.follow import rm_app
from tony_py.airflow.rules import (SUBMIT_ARGS, FollowState, Verdict, check_arguments, job_verdict, rm_urls,
                                   submit_verdict, task_lines)
from tony_py.airflow.trigger import RM_UNREACHABLE_S, TonyTrigger
from tony_py.client.job import FINAL_STATES, ApplicationGone
from tony_py.errors import TonyError

_DEFAULTS = {"local": False}


class TonyOperator(BaseOperator):
    """Run a TonY-py job; keyword arguments as tony_py.api.submit, plus deferrable (default:
    [operators] default_deferrable) and poll_interval (seconds between looks at the job)."""

    template_fields = ("executes", "src_dir", "task_params", "python_venv", "python_binary_path", "shell_env",
                       "container_env", "conf_file", "conf", "hdfs_classpath", "sidecar_tensorboard_log_dir")
    ui_color = "#f4d8a8"

    def __init__(self, *, deferrable: bool | None = None, poll_interval: float = 5.0, **kwargs: Any):
        submit_args = {name: kwargs.pop(name) for name in list(kwargs) if name in SUBMIT_ARGS}
        super().__init__(**kwargs)
        if deferrable is None:
            deferrable = conf.getboolean("operators", "default_deferrable", fallback=False)
        check_arguments(self.task_id, submit_args, deferrable, poll_interval)
        for name in SUBMIT_ARGS:
            setattr(self, name, submit_args.get(name, _DEFAULTS.get(name)))
        self.deferrable = deferrable
        self.poll_interval = float(poll_interval)
        self._job = None
        self._killed = False  # on_kill was called
        self._kill_sent = False  # a kill of the application was sent (once is enough)

    # ---- submit and follow ------------------------------------------------------------------------
    def execute(self, context) -> str:
        try:
            job = api.submit(**{name: getattr(self, name) for name in SUBMIT_ARGS})
        except Exception as exc:  # noqa: BLE001 - every submit failure becomes a verdict
            self._fail(submit_verdict(exc), "")
        self._job = job
        follow_state = None
        try:
            if self._killed:  # on_kill came while submitting, before there was a job to kill
                raise AirflowFailException("the task was killed while it submitted; the application is killed")
            context["ti"].xcom_push(key="app_id", value=job.app_id)
            self.log.info("submitted %s; tracking URL: %s", job.app_id, job.tracking_url)
            for warning in job.warnings:
                self.log.warning("%s", warning)
            if self.deferrable:
                follow_state = self._follow_state(job)
            if follow_state is None:
                self._follow(job)
                if job.report.get("state") in FINAL_STATES:  # not after a kill: Job.kill cleans up itself
                    job.cleanup()
        except BaseException:
            # lost track of it (the RM unreachable too long), a failure here, or the task is
            # ending: no second copy may run beside a retry, so the application goes too
            self._kill_quietly(job)
            raise
        finally:
            self._job = None
            job.close()  # the client's JVM; a deferred application runs on
        if follow_state is not None:
            if self._killed:  # killed between the submit's end and the deferral
                self._kill_detached(job.app_id, "the Airflow task was killed")
                raise AirflowFailException("the task was killed; the application is killed")
            self.defer(trigger=TonyTrigger(**follow_state.to_kwargs()), method_name="execute_complete")
        report = job.report
        return self._end(context, job.app_id, report.get("final_status"), job.am_status,
                         report.get("diagnostics") or "")

    def _follow_state(self, job) -> FollowState | None:
        """What the trigger needs, if it can see the application from here (the RM's REST API
        without Kerberos' SPNEGO); None: the job is followed in this worker slot instead."""
        state = FollowState(job.app_id, rm_urls(job.tracking_url), self.poll_interval, job.handover()["secret"])
        try:
            rm_app(state.rm_urls, job.app_id)
            return state
        except OSError as exc:
            self.log.warning("cannot follow %s without a worker slot (%s): following it here", job.app_id, exc)
            return None

    def _follow(self, job) -> None:
        seen: dict[str, list] = {}
        failing_since = None
        while True:
            try:
                report = job.refresh()
                failing_since = None
            except ApplicationGone as exc:  # YARN answered that it has no such application: nothing to wait for
                self._fail(Verdict(False, True, 1, str(exc)), "")
            except TonyError as exc:  # YARN did not answer: the infrastructure's, for a while
                failing_since = failing_since or time.monotonic()
                if time.monotonic() - failing_since > RM_UNREACHABLE_S:
                    self._fail(Verdict(False, True, 1, f"lost track of {job.app_id}: {exc}"), "")
                self.log.warning("%s", exc)
                time.sleep(self.poll_interval)
                continue
            for line in task_lines(seen, (job.am_status or {}).get("tasks") or []):
                self.log.info("%s", line)
            if report.get("state") in FINAL_STATES or self._killed:
                return
            time.sleep(self.poll_interval)

    def execute_complete(self, context, event: dict) -> str:
        """Back from the trigger: the same end as the synchronous path."""
        if event.get("error"):
            # a retry must not run beside a copy nobody follows any more: it goes first
            self._kill_detached(event.get("app_id"), f"the trigger lost track of it: {event['error']}")
            self._fail(Verdict(False, True, 1, f"lost track of {event.get('app_id')}: {event['error']}"), "")
        context["ti"].xcom_push(key="app_id", value=event["app_id"])
        return self._end(context, event["app_id"], event.get("final_status"), event.get("am_status"),
                         event.get("yarn_diagnostics") or "")

    # ---- the end --------------------------------------------------------------------------------------
    def _end(self, context, app_id: str, final_status: str | None, status: dict | None, yarn_diag: str) -> str:
        context["ti"].xcom_push(key="final_status", value=final_status)
        verdict = job_verdict(final_status, status, yarn_diag, killed_here=self._killed)
        self.log.info("%s finished: %s", app_id, final_status)
        if verdict.succeeded:
            if (status or {}).get("diagnostics"):  # e.g. failures the job tolerated
                self.log.info("%s", status["diagnostics"].strip())
            return app_id
        # the AM's own copy first: it has the root cause's stderr tail and traceback
        self._fail(verdict, ((status or {}).get("diagnostics") or yarn_diag).strip())

    def _fail(self, verdict: Verdict, diagnostics: str):
        if diagnostics:
            self.log.error("%s", diagnostics)
        if verdict.retry:
            self.log.error("%s; Airflow may retry it", verdict.reason)
            raise AirflowException(verdict.reason)
        self.log.error("%s; not retried (`tony submit` would exit %d)", verdict.reason, verdict.exit_code)
        raise AirflowFailException(verdict.reason)

    def _kill_quietly(self, job) -> None:
        if not self._kill_sent and (job.report or {}).get("state") not in FINAL_STATES:
            self._kill_sent = True
            try:
                job.kill("the Airflow task ended before the application")
            except Exception as exc:  # noqa: BLE001 - the original error matters more
                self.log.warning("could not kill %s: %s", job.app_id, exc)

    def _kill_detached(self, app_id: str | None, reason: str) -> None:
        """Kill an application this process no longer holds a client for (through a new one)."""
        if not app_id or self._kill_sent:
            return
        self._kill_sent = True
        try:
            with api.attach(app_id) as job:
                if (job.refresh() or {}).get("state") not in FINAL_STATES:
                    self.log.warning("killing %s: %s", app_id, reason)
                    job.kill(reason)
        except Exception as exc:  # noqa: BLE001 - the failure being reported matters more
            self.log.warning("could not kill %s: %s", app_id, exc)

    def on_kill(self) -> None:
        """The task was killed (SIGTERM to the task process): kill the application and wait
        until YARN has ended it, then remove its staging dir (Job.kill)."""
        self._killed = True
        job = self._job
        if job is not None and not self._kill_sent:
            self._kill_sent = True
            self.log.warning("killing %s", job.app_id)
            job.kill("the Airflow task was killed")
