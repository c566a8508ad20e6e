"""The executor: the supervisor of one task in one YARN container (`python -S -m tony_py.executor`).

Before anything else it reads the app secret from the container's credentials
(tony_py/appsecret.py) and fetches what the job runs from the AM (GET /v1/job: the JobSpec and
tony-final.xml; GET /v1/src: the zipped src_dir when the AM serves it), signed with that secret;
on a Kerberos cluster YARN localized those files instead (jobfiles.py). Then supervisor.py runs
the task, attempt after attempt, while control.py listens for a new AM attempt's address.

Standard library plus what the client ships with the job (psutil, when shipped, for metrics;
defusedxml to read YARN's GPU settings).
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import sys
import zipfile
from pathlib import Path

from tony_py import appsecret
from tony_py.auth import Signer, Verifier
from tony_py.config.spec import JobSpec
from tony_py.errors import EXECUTOR_AM_LOST, EXECUTOR_REFUSED
from tony_py.executor.channel import AmChannel, AmUnreachable, RequestRefused
from tony_py.executor.control import START_AFTER_S, ControlServer
from tony_py.executor.jobfiles import UnpackError, fetch_job_files, load_job, unpack_src
from tony_py.executor.lease import Lease
from tony_py.executor.settings import Settings
from tony_py.executor.supervisor import Executor

log = logging.getLogger("tony.executor")


def main() -> None:
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    env = dict(os.environ)
    cwd = Path.cwd()
    task = env["TONY_TASK"]
    secret = appsecret.take(cwd, env)
    principal = env.get("CONTAINER_ID") or task
    # Until the spec is in, the AM may be lost for as long as the job allows (an AM fail-over).
    channel = AmChannel(env["TONY_AM_URL"], Signer(secret, principal),
                        give_up_after_s=float(env["TONY_AM_LOST_TIMEOUT_S"]))
    try:
        job = load_job(channel, cwd, task)
        settings = Settings.load(env, JobSpec.from_dict(job["spec"]), secret)
        channel.lease = Lease(settings.lease_s)
    except AmUnreachable as exc:
        log.error("cannot get the job from the AM: %s", exc)
        sys.exit(EXECUTOR_AM_LOST)
    except (RequestRefused, ValueError, KeyError, OSError) as exc:
        log.error("cannot read the job (from the AM at %s): %s", env["TONY_AM_URL"], exc)
        sys.exit(EXECUTOR_REFUSED)
    control = ControlServer(env.get("NM_HOST") or socket.getfqdn(), Verifier(settings.secret), channel,
                            start_after_s=START_AFTER_S)  # (its port now, its server once the task has started)
    executor = Executor(settings, channel, env, cwd, control_port=control.port)
    signal.signal(signal.SIGTERM, executor.on_sigterm)
    log.info("executor for %s in %s (pid %d); control endpoint %s:%d", settings.task, settings.container_id,
             os.getpid(), control.address, control.port)
    try:
        fetch_job_files(channel, settings, job.get("final_conf"), cwd)
    except AmUnreachable as exc:
        log.error("lost the AM while fetching the job's files: %s", exc)
        sys.exit(EXECUTOR_AM_LOST)
    except (RequestRefused, OSError) as exc:
        sys.exit(executor.report_setup_failure(0, "cannot fetch the job's files from the AM", exc))
    try:
        unpack_src(settings.src_zip, cwd)
    except (UnpackError, zipfile.BadZipFile, OSError) as exc:
        sys.exit(executor.report_setup_failure(0, "cannot unpack src_dir", exc))
    sys.exit(executor.run())
