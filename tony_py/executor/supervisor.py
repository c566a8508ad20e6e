"""The executor's supervision of one task, attempt after attempt.

Per gang attempt:
  reserve port(s) ─▶ register host:port ─▶ long-poll for the cluster spec ─▶ set the env,
  release the ports, start the user process ─▶ heartbeat while it runs ─▶ report its exact
  exit code or signal ─▶ do what the AM answers: exit, or restart in place (next attempt).
An AM instruction to restart or exit can arrive with any answer; then the process group is
killed first. While the process runs, its heartbeats keep the executor's lease (lease.py,
heartbeats.py): when the AM has not answered for tony.task.executor.lease-sec, the task is
killed (fenced) and the executor reports that once it reaches an AM again; if no AM answers for
tony.task.executor.am-lost-timeout-sec, it exits.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path

from tony_py.appsecret import TOKEN_FILE_ENV
from tony_py.config.traits import traits
from tony_py.errors import EXECUTOR_AM_LOST, EXECUTOR_REFUSED
from tony_py.executor.channel import AmChannel, AmUnreachable, RequestRefused
from tony_py.executor.gpus import find_nvidia_smi, nodemanager_assignment
from tony_py.executor.heartbeats import Heartbeats
from tony_py.executor.metrics import MetricsSampler
from tony_py.executor.process import UserProcess, describe_returncode, tail
from tony_py.executor.settings import Instruction, Settings, check
from tony_py.executor.tokens import TokenRefresher
from tony_py.executor.taskenv import (describe_command, listening, progress_age, read_error_file, reserve_ports,
                                      user_env)
from tony_py.frameworks import launch
from tony_py.frameworks.envplan import expand
from tony_py.net import wire

log = logging.getLogger("tony.executor")

MAX_RESULT = 512 << 10  # a result this large drops its details (the AM takes at most 1 MiB)
MAX_SPEC_POLL_S = 20.0


class Executor:
    def __init__(self, settings: Settings, channel: AmChannel, base_env: dict, cwd: Path,
                 control_port: int | None = None):
        self.settings = settings
        self.channel = channel
        self.base_env = base_env
        self.cwd = cwd
        self.yarn_gpus = self._yarn_gpus()
        self.control_port = control_port
        self.child: UserProcess | None = None
        self.progress_file: str | None = None
        self.callback_file: str | None = None
        self.tb_port: int | None = None
        self.reported: set[str] = set()
        self.sampler = MetricsSampler(False)
        self.metrics: dict = {}  # a sample waiting for the next heartbeat
        self.terminated = threading.Event()
        self.preempt_deadline: float | None = None  # a preemption's SIGTERM went to this attempt's task
        self.tokens = TokenRefresher(settings.secret, settings.container_id or settings.task,
                                     os.environ.get(TOKEN_FILE_ENV))

    def _call(self, request: type[wire.Call], attempt: int, **values) -> wire.Call:
        """A call to the AM about this task's attempt (tony_py/net/wire.py)."""
        return request(task=self.settings.task, attempt=attempt, container=self.settings.container_id, **values)

    def _yarn_gpus(self) -> list[str] | None:
        """The devices the NodeManager itself assigned to this container (its GPU plugin under
        the LinuxContainerExecutor): they replace the AM's choice in the task's environment."""
        if not self.settings.gpus or self.settings.gpu_assignment != "auto":
            return None
        devices = nodemanager_assignment(self.base_env.get("NM_HOST"), self.base_env.get("NM_HTTP_PORT"),
                                         self.settings.container_id)
        if devices and self.base_env.get("YARN_CONTAINER_RUNTIME_TYPE") == "docker":
            # YARN's Docker runtime mounts only these devices and sets NVIDIA_VISIBLE_DEVICES
            # itself; inside the container they are numbered from 0, so the host indices would
            # name devices the task cannot see. Reported, not put into the env.
            log.info("the NodeManager assigned GPU(s) %s to this Docker container", ",".join(devices))
            return devices
        if devices:
            log.info("the NodeManager assigned GPU(s) %s to this container", ",".join(devices))
            self.base_env = {**self.base_env, "CUDA_VISIBLE_DEVICES": ",".join(devices)}
            if "NVIDIA_VISIBLE_DEVICES" in self.base_env:
                self.base_env["NVIDIA_VISIBLE_DEVICES"] = ",".join(devices)
        return devices

    # ---- attempts -----------------------------------------------------------------------------
    def run(self) -> int:
        try:
            return self._run()
        finally:
            # Whatever ends the executor (an instruction, a lost AM, a bug), nothing it started
            # may outlive it.
            self._stop_child()

    def _run(self) -> int:
        attempt = 0
        while True:
            try:
                self.run_attempt(attempt)
                return 0
            except Instruction as ins:
                self._stop_child()
                if ins.action == "restart" and not self.terminated.is_set():
                    log.info("restarting in place for attempt %d", ins.attempt)
                    attempt = ins.attempt
                    continue
                log.info("exiting: %s", ins.reason or ins.action)
                return 0
            except AmUnreachable as exc:
                log.error("%s; killing the user process and exiting", exc)
                self._stop_child()
                return EXECUTOR_AM_LOST
            except RequestRefused as exc:
                log.error("the AM refused a call: %s; exiting", exc)
                return EXECUTOR_REFUSED

    def report_setup_failure(self, attempt: int, what: str, exc: Exception) -> int:
        """The task cannot start at all (its src_dir cannot be unpacked, …): say why, as a
        result, so the job's root cause names it."""
        log.error("%s: %s", what, exc)
        error = {"type": "TonyPySetupError", "message": f"{what}: {exc}"}
        try:
            check(self.channel.send(self._call(wire.Result, attempt, exit_code=1, error=error)))
        except (Instruction, AmUnreachable, RequestRefused) as report_error:
            log.error("could not report it: %s", report_error)
        return 1

    def run_attempt(self, attempt: int) -> None:
        env, tb_port = self._register(attempt)
        self.preempt_deadline = None
        out = self.settings.log_dir / f"attempt-{attempt}.stdout"
        err = self.settings.log_dir / f"attempt-{attempt}.stderr"
        self.progress_file = env["TONY_PROGRESS_FILE"]
        self.callback_file = env["TONY_CALLBACK_FILE"]
        self.tb_port, self.reported = tb_port, set()
        gpu_metrics = self.settings.gpus > 0 and self.settings.gpu_metrics
        self.sampler = MetricsSampler(gpu_metrics, env.get("CUDA_VISIBLE_DEVICES"),
                                      find_nvidia_smi(self.base_env) if gpu_metrics else None)
        self.channel.lease.publish(Path(env["TONY_LEASE_FILE"]))
        s = self.settings
        command, env = launch(s.framework, s.command, env, s.max_restarts, str(self.cwd))
        self.child = UserProcess(command, env, str(self.cwd), out, err)
        # Not the whole command: task_params may carry credentials, and this log is aggregated.
        log.info("started pid %d: %s%s", self.child.pid, describe_command(s.command) or "(command not shown)",
                 traits(s.framework).wrapped if command != s.command else "")
        try:
            check(self.channel.send(self._call(wire.Started, attempt, pid=self.child.pid)))
            code, timed_out, fenced = self._supervise(attempt, env.get("TONY_PREEMPTION_DEADLINE_FILE"))
        finally:
            self.channel.lease.withdraw()
        ended_at = time.time()
        exit_code, sig = describe_returncode(code)
        # Background processes the command left behind go with it (as at the end of a container);
        # after a preemption's SIGTERM they may still be writing the checkpoint: until the kill.
        preempted = self.preempt_deadline is not None
        self.child.kill_group(grace_s=max(2.0, self.preempt_deadline - time.time()) if preempted else 2.0)
        log.info("user process ended: %s%s", f"signal {sig}" if sig else f"exit code {exit_code}",
                 " (fenced: the lease ran out)" if fenced else "")
        self._report(attempt, self._call(
            wire.Result, attempt, exit_code=exit_code, signal=sig, timed_out=timed_out, fenced=fenced,
            preempted=preempted, ended_ago_s=time.time() - ended_at, stderr_tail=tail(err),
            error=read_error_file(env["TONY_ERROR_FILE"]), metrics=self._metrics()).to_body())

    def _register(self, attempt: int) -> tuple[dict, int | None]:
        """Register with fresh ports, wait for the spec: the task's env, and its TensorBoard port."""
        socks = reserve_ports(2 if self.settings.reserve_tb_port else 1)
        try:
            port = socks[0].getsockname()[1]
            tb_port = socks[1].getsockname()[1] if len(socks) > 1 else None
            check(self.channel.send(self._call(wire.Register, attempt, port=port, tb_port=tb_port,
                                               control_port=self.control_port, gpus=self.yarn_gpus)))
            log.info("registered %s attempt %d on port %d", self.settings.task, attempt, port)
            answer = self._wait_for_spec(attempt)
            env = user_env(self.settings, self.base_env, expand(answer.get("env", {}), answer.get("shared")), attempt,
                           self.cwd)
        finally:
            for s in socks:  # released just before the child binds them
                s.close()
        return env, tb_port

    def _report(self, attempt: int, result: dict) -> None:
        """The run's result (a wire.Result's body); the AM's answer is obeyed (an instruction is raised)."""
        if len(json.dumps(result)) > MAX_RESULT:
            result = {k: v for k, v in result.items() if k not in wire.Result.DETAILS}
        try:
            answer = self.channel.post(wire.Result.PATH, result)
        except RequestRefused as exc:
            # The AM could not take the details (not understood): the exit code and signal still
            # decide the job, so report them without the rest.
            log.error("the AM refused the full result (%s); reporting the exit status alone", exc)
            answer = self.channel.post(wire.Result.PATH, wire.Result.essentials(result))
        check(answer)

    def _wait_for_spec(self, attempt: int) -> dict:
        deadline = time.monotonic() + self.settings.registry_timeout_s if self.settings.registry_timeout_s > 0 else None
        # each poll returns within half a lease, so the answer that starts the task leaves it at
        # least half a lease (the lease counts from when the poll was sent)
        poll_s = min(MAX_SPEC_POLL_S, self.settings.lease_s / 2)
        while True:
            answer = check(self.channel.wait_spec(self.settings.task, attempt, self.settings.container_id,
                                                  timeout=poll_s))
            if answer is not None and not self.channel.lease.expired():
                return answer
            if self.terminated.is_set():
                raise Instruction({"action": "exit", "reason": "terminated"})
            if deadline and time.monotonic() > deadline:
                raise SystemExit(f"no cluster spec after {self.settings.registry_timeout_s:.0f} s "
                                 "(tony.task.executor.registry-timeout-sec)")

    # ---- while the task runs ---------------------------------------------------------------------
    def _supervise(self, attempt: int, env_file: str | None = None) -> tuple[int, bool, bool]:
        """Wait for the child while its heartbeats keep the lease; (returncode, timed_out, fenced).
        env_file: where a preemption's deadline is written for the task (TONY_PREEMPTION_DEADLINE_FILE)."""
        started = time.monotonic()
        # The first sample a second in: at once it would find only a process still starting, and
        # its scan of /proc would compete with that start (16 tasks starting on a 2-core node).
        next_metrics, next_probe = started + min(1.0, self.settings.metrics_interval_s), 0.0
        s = self.settings
        beats = Heartbeats(self.channel, s.secret, s.container_id or s.task, s.heartbeat_s,
                           body=lambda: self._beat_body(attempt), fence=self.child.kill_now,
                           tokens=self.tokens.offered).start()
        try:
            while True:
                code = self.child.poll(timeout=0.1)
                if code is not None:
                    return code, False, beats.fenced.is_set()
                now = time.monotonic()
                if self.terminated.is_set():
                    raise Instruction({"action": "exit", "reason": "the container is being stopped"})
                if beats.refused:
                    raise RequestRefused(400, f"a heartbeat: {beats.refused}")
                if beats.instruction:
                    raise Instruction(beats.instruction)
                if beats.preempt is not None and self.preempt_deadline is None:  # once per attempt
                    self._warn_of_preemption(beats.preempt, env_file)
                if s.execution_timeout_s > 0 and now - started > s.execution_timeout_s:
                    log.error("execution timeout (%.0f s): killing the process group", s.execution_timeout_s)
                    self.child.kill_group()
                    return (self.child.returncode if self.child.returncode is not None else -9), True, False
                if now >= next_metrics:  # process-tree RSS: cheap, not every second (tony.task.metrics-interval-ms)
                    next_metrics = now + self.settings.metrics_interval_s
                    self.metrics = self._metrics()
                probe = now >= next_probe  # is TensorBoard up yet: a connect, once a heartbeat interval
                if probe:
                    next_probe = now + self.settings.heartbeat_s
                self._report_once(attempt, probe_tensorboard=probe)
        finally:
            beats.stop()

    def _warn_of_preemption(self, warning: dict, deadline_file: str | None) -> None:
        """YARN will kill the container at the deadline: the task gets SIGTERM now (its process
        group, as TF's PreemptionCheckpointHandler, JAX's preemption sync and plain handlers
        expect) to checkpoint and exit; the deadline is in its file first."""
        try:  # what is left, on this node's clock (the AM's need not agree), counted from when the
            # heartbeat that brought it was sent: never later than YARN's kill, however long the
            # answer took or this loop took to get to it
            sent_ago = max(0.0, time.monotonic() - float(warning.get("sent_at", time.monotonic())))
            deadline = time.time() - sent_ago + float(warning.get("left_s"))
        except (TypeError, ValueError):
            deadline = None
        self.preempt_deadline = deadline if deadline is not None else time.time()
        if deadline is not None and deadline_file:
            try:
                tmp = f"{deadline_file}.tmp"
                with open(tmp, "w") as f:
                    f.write(repr(deadline))
                os.replace(tmp, deadline_file)
            except OSError as exc:
                log.error("could not write the preemption deadline to %s: %s", deadline_file, exc)
        left = f"{deadline - time.time():.1f} s" if deadline is not None else "an unknown time"
        log.warning("YARN is preempting this container (the kill comes in %s): SIGTERM to the task to checkpoint", left)
        self.child.terminate_group()

    def _beat_body(self, attempt: int) -> dict:
        # a sample travels once, with the next heartbeat (the AM keeps the latest): the
        # heartbeats in between stay small for an AM serving thousands of them a second
        metrics, self.metrics = self.metrics, {}
        return self._call(wire.Heartbeat, attempt, metrics=metrics or None,
                          progress_age_s=progress_age(self.progress_file)).to_body()

    def _report_once(self, attempt: int, probe_tensorboard: bool) -> None:
        """Things the AM waits for, each reported once: a callback file the process wrote, and
        TensorBoard listening on this task's TB_PORT."""
        if "callback" not in self.reported and self.callback_file and os.path.exists(self.callback_file):
            self.reported.add("callback")
            try:
                with open(self.callback_file) as f:
                    info = json.loads(f.read(4096))
                if not isinstance(info, dict):
                    raise ValueError("not a JSON object")
            except (OSError, ValueError) as exc:
                log.error("unreadable callback file %s: %s", self.callback_file, exc)
            else:
                check(self.channel.send(self._call(wire.Callback, attempt, info=info)))
        if (probe_tensorboard and "tensorboard" not in self.reported and self.tb_port
                and listening(self.settings.host, self.tb_port)):
            self.reported.add("tensorboard")
            url = f"http://{self.settings.host}:{self.tb_port}"
            log.info("TensorBoard is up at %s", url)
            check(self.channel.send(self._call(wire.Tensorboard, attempt, url=url)))

    def _metrics(self) -> dict:
        return self.sampler.sample(self.child.pid if self.child is not None else None)

    def _stop_child(self) -> None:
        if self.child is not None and self.child.alive():
            log.info("killing the process group of pid %d", self.child.pid)
            self.child.kill_group()

    def on_sigterm(self, *_):
        # The NodeManager is stopping the container. The user process is in its own process
        # group, which the NodeManager does not signal: stop it here, fast (SIGKILL follows
        # within ~250 ms).
        self.terminated.set()
        if self.child is not None and self.child.alive():
            self.child.kill_group(grace_s=0.2)
        raise SystemExit(143)
