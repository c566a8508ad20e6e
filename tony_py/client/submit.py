"""`tony submit` / `python -m tony_py.submit`: validate, stage, submit, follow.

Order matters for the no-leftovers promise: every check that can fail on bad input runs before
the application id is reserved and before anything is uploaded. From the moment something
exists on the cluster, any failure (or Ctrl-C) removes it again: the staging dir is deleted and
a submitted application is killed.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tony_py import appsecret, paths
from tony_py.am.launch import JobMeta
from tony_py.bridge import jvm
from tony_py.bridge.gateway import ClientGateway
from tony_py.client.flags import SubmitArgs, parse_args
from tony_py.client.monitor import Monitor
from tony_py.client.staging import Resource, Stager, build_runtime_zip, check_local_inputs, sha256_file, zip_src_dir
from tony_py.config.layers import TonyConf, load_conf
from tony_py.config.spec import JobSpec, build_job_spec, check_fits, parse_env_list
from tony_py.config.xmlconf import to_xml
from tony_py.errors import ConfigError, TonyError, UsageError

AM_HEAP = "-Xmx256m"
AM_CLASS = "io.tonypy.am.ApplicationMaster"
VENV_LINK = "venv"
RUNTIME_LINK = "tony_runtime"
JAR_LINK = "tony-py.jar"
SRC_LINK = "tony_src.zip"


@dataclass
class PreparedJob:
    args: SubmitArgs
    conf: TonyConf
    spec: JobSpec
    task_python: str


def _python_for(args: SubmitArgs) -> str | None:
    """TonY's rule: python_binary_path is relative to the unpacked venv, or absolute."""
    if not args.python_binary_path:
        return None
    p = args.python_binary_path
    if os.path.isabs(p):
        return p
    return f"{VENV_LINK}/{p}" if args.python_venv else p


def compose_command(args: SubmitArgs) -> str | None:
    if not args.executes:
        return None
    python = _python_for(args)
    parts = [shlex.quote(python), args.executes] if python else [args.executes]
    if args.task_params:
        parts.append(args.task_params)
    return " ".join(parts)


def prepare(args: SubmitArgs) -> PreparedJob:
    """Everything that can be checked without a cluster; raises UsageError on bad input."""
    if args.sidecar_tensorboard_log_dir:
        raise UsageError("--sidecar_tensorboard_log_dir: the TensorBoard sidecar is not supported yet")
    conf = load_conf(args.conf_file, args.conf)
    for flag, key, values in (
        ("--shell_env", "tony.execution.envs", args.shell_env),
        ("--container_env", "tony.containers.envs", args.container_env),
    ):
        for value in values:
            parse_env_list(value, flag, for_yarn=flag == "--container_env")
            conf.set(key, value, flag, append=True)
    command = compose_command(args)
    if command:
        conf.set("tony.containers.command", command, "--executes")
    python = _python_for(args)
    if python:
        conf.set("tony.python-exec-path", python, "--python_binary_path")
    spec = build_job_spec(conf)
    check_local_inputs(args.src_dir, args.python_venv)
    if args.executes is not None and not args.executes.strip():
        raise UsageError("--executes: empty command")
    if args.executes and python and args.src_dir and Path(args.src_dir).is_dir():
        script = args.executes.split()[0]
        if not (Path(args.src_dir) / script).exists():
            raise UsageError(f"--executes {args.executes}: {script} is not in --src_dir {args.src_dir}")
    if args.hdfs_classpath:
        for entry in args.hdfs_classpath.split(","):
            if entry.strip() and "://" not in entry and not entry.strip().startswith("/"):
                raise UsageError(f"--hdfs_classpath {entry}: expected an absolute or hdfs:// directory")
    _check_resources(conf, spec)
    task_python = python or conf.get("tony.executor.python") or "python3"
    return PreparedJob(args, conf, spec, task_python)


RESERVED_LINKS = frozenset({VENV_LINK, RUNTIME_LINK, JAR_LINK, SRC_LINK, "tony-final.xml", "tony-job.json",
                            appsecret.SECRET_FILE})


def _check_resources(conf: TonyConf, spec: JobSpec) -> None:
    """Local resources exist, and no two resources of a task share a name (or take one of ours)."""
    common: set[str] = set()
    for key in ["tony.containers.resources"] + [f"tony.{t.name}.resources" for t in spec.types]:
        names = set(common)
        for entry in (conf.get(key) or "").split(","):
            if not entry.strip():
                continue
            path, name, _ = _parse_resource_entry(entry.strip())
            if "://" not in path and not Path(path).exists():
                raise UsageError(f"{key}: {path} does not exist")
            link = name or path.rstrip("/").rsplit("/", 1)[-1]
            if link in RESERVED_LINKS or link in names:
                taken = "is reserved by TonY-py" if link in RESERVED_LINKS else "is used twice"
                raise UsageError(f"{key}: the name {link!r} {taken}; rename it with PATH::NAME")
            names.add(link)
        if key == "tony.containers.resources":
            common = names


def _parse_resource_entry(entry: str) -> tuple[str, str | None, bool]:
    """TonY's `PATH[::NAME][#archive]`."""
    archive = entry.endswith("#archive")
    if archive:
        entry = entry[: -len("#archive")]
    path, _, name = entry.partition("::")
    return path.strip(), (name.strip() or None), archive


class Submission:
    def __init__(self, gw: ClientGateway, job: PreparedJob, out=sys.stdout):
        self.gw = gw
        self.job = job
        self.out = out
        self.app_id: str | None = None
        self.stager: Stager | None = None
        self.monitor: Monitor | None = None
        self.submitted = False
        self.submitted_at: float | None = None

    def say(self, text: str) -> None:
        if not self.job.args.quiet:
            print(text, file=self.out, flush=True)

    # ---- staging ---------------------------------------------------------------------------
    def _stage(self, tmp: Path) -> tuple[dict[str, Resource], JobMeta]:
        args = self.job.args
        st = self.stager
        st.create_dirs()
        resources: dict[str, Resource] = {}
        task_links: list[str] = []

        runtime = build_runtime_zip(tmp / "runtime.zip")
        resources[RUNTIME_LINK] = st.upload_cached(runtime, f"tony-runtime-{sha256_file(runtime, remember=False)[:20]}.zip", "ARCHIVE")
        task_links.append(RUNTIME_LINK)
        jar = paths.locate_jar()
        resources[JAR_LINK] = st.upload_cached(jar, f"tony-py-{sha256_file(jar)[:20]}.jar", "FILE")

        if args.python_venv:
            if "://" in args.python_venv:
                resources[VENV_LINK] = st.remote(args.python_venv, "ARCHIVE")
            else:
                venv = Path(args.python_venv)
                resources[VENV_LINK] = st.upload_cached(venv, f"venv-{sha256_file(venv)[:20]}.zip", "ARCHIVE")
            task_links.append(VENV_LINK)

        src_zip = None
        if args.src_dir:
            if "://" in args.src_dir:
                resources[SRC_LINK] = st.remote(args.src_dir, "FILE")
            else:
                src = Path(args.src_dir)
                local = src if src.is_file() else zip_src_dir(src, tmp / "src.zip")
                resources[SRC_LINK] = st.upload_private(local, f"tony_src_{self.app_id}.zip")
            src_zip = SRC_LINK
            task_links.append(SRC_LINK)

        for entry in (self.job.conf.get("tony.containers.resources") or "").split(","):
            if entry.strip():
                for link, res in self._user_resource(entry.strip(), tmp, "tony.containers.resources"):
                    resources[link] = res
                    task_links.append(link)
        type_links: dict[str, list[str]] = {}
        for task_type in self.job.spec.types:
            key = f"tony.{task_type.name}.resources"
            for entry in (self.job.conf.get(key) or "").split(","):
                if entry.strip():
                    for link, res in self._user_resource(entry.strip(), tmp, key):
                        resources[link] = res
                        type_links.setdefault(task_type.name, []).append(link)

        hdfs_cp = []
        for directory in (args.hdfs_classpath or "").split(","):
            if directory.strip():
                for path in self.gw.call("list --hdfs_classpath", self.gw.fs.listFiles, directory.strip()):
                    link = path.rsplit("/", 1)[-1]
                    resources[link] = st.remote(path, "FILE")
                    task_links.append(link)
                    hdfs_cp.append(link)

        meta = JobMeta(
            app_id=self.app_id,
            staging_dir=st.staging_dir,
            user=getpass.getuser(),
            resources={},
            task_resources=task_links + ["tony-final.xml", appsecret.SECRET_FILE],
            task_python=self.job.task_python,
            src_zip=src_zip,
            extra={"hdfs_classpath": hdfs_cp, "type_resources": type_links},
        )
        resources[appsecret.SECRET_FILE] = st.write_text(appsecret.SECRET_FILE, appsecret.generate(), mode=0o600)
        final = self.job.conf.resolved()
        final["tony.application.id"] = self.app_id
        final["tony.executor.python"] = self.job.task_python
        resources["tony-final.xml"] = st.write_text("tony-final.xml", to_xml(final))
        shipped = set(meta.task_resources).union(*type_links.values())
        meta.resources = {k: v.to_json() for k, v in resources.items() if k in shipped}
        resources["tony-job.json"] = st.write_text("tony-job.json", json.dumps(meta.to_json(), indent=1))
        return resources, meta

    def _user_resource(self, entry: str, tmp: Path, key: str):
        """TonY's resource entries: remote paths are localized as they are, local files are
        uploaded, local directories are zipped and localized as archives."""
        path, name, archive = _parse_resource_entry(entry)
        if "://" in path:
            return [(name or path.rstrip("/").rsplit("/", 1)[-1], self.stager.remote(path, "ARCHIVE" if archive else "FILE"))]
        local = Path(path)
        if not local.exists():
            raise UsageError(f"{key}: {path} does not exist")
        if local.is_dir():
            zipped = zip_src_dir(local, tmp / f"res-{local.name}.zip")
            return [(name or local.name, self.stager.upload_private(zipped, f"{local.name}.zip", "ARCHIVE"))]
        return [(name or local.name, self.stager.upload_private(local, local.name, "ARCHIVE" if archive else "FILE"))]

    # ---- the AM ------------------------------------------------------------------------------
    def _am_request(self, resources: dict[str, Resource]) -> dict:
        spec = self.job.spec
        classpath = ["{{PWD}}", "{{PWD}}/" + JAR_LINK]
        classpath += list(self.gw.call("read the application classpath", self.gw.bridge.applicationClasspath))
        am_resources = {k: resources[k].to_json()
                        for k in (JAR_LINK, RUNTIME_LINK, "tony-final.xml", "tony-job.json", appsecret.SECRET_FILE)}
        java_opts = " ".join([AM_HEAP, *jvm.FAST_START_OPTS, *jvm.JDK17_OPENS])
        return {
            "name": spec.name,
            "queue": spec.queue,
            "type": spec.app_type,
            "tags": list(spec.tags) + ["tony-py"],
            "node_label": spec.node_label,
            "security": spec.security_enabled,
            "max_attempts": spec.am_max_attempts,
            # A new AM attempt re-adopts the running tasks instead of starting over.
            "keep_containers": True,
            "memory_mb": spec.am.memory_mb,
            "vcores": spec.am.vcores,
            "gpus": spec.am.gpus,
            "launch": {
                "resources": am_resources,
                "env": {
                    "CLASSPATH": "<CPS>".join(classpath),
                    "PYTHONPATH": f"{{{{PWD}}}}/{RUNTIME_LINK}:{{{{PWD}}}}/{RUNTIME_LINK}/deps",
                    "PYTHONUNBUFFERED": "1",
                    "TONY_AM_PYTHON": self.job.conf.get("tony.am.python") or "python3",
                },
                "commands": [f"{{{{JAVA_HOME}}}}/bin/java {java_opts} {AM_CLASS} 1><LOG_DIR>/am.log 2>&1"],
            },
        }

    def _check_cluster_inputs(self) -> None:
        """The checks that need the cluster, still before anything is created on it."""
        spec, args = self.job.spec, self.job.args
        cluster = self.gw.json("read the cluster's nodes", self.gw.bridge.clusterJson)
        check_fits(spec, cluster)
        if not self.gw.call("look up the queue", self.gw.bridge.queueExists, spec.queue):
            raise ConfigError("tony.yarn.queue", f"the scheduler has no queue {spec.queue!r}")
        for flag, path in (("--src_dir", args.src_dir), ("--python_venv", args.python_venv)):
            if path and "://" in path and not self.gw.call(f"check {flag}", self.gw.fs.exists, path):
                raise UsageError(f"{flag} {path}: no such file on the cluster file system")

    def run(self) -> int:
        spec = self.job.spec
        self._check_cluster_inputs()
        self.app_id = self.gw.call("create an application", self.gw.bridge.createApplication)
        self.stager = Stager(self.gw, self.app_id)
        keep_staging = False
        try:
            with tempfile.TemporaryDirectory(prefix="tony-submit-") as tmp:
                resources, _meta = self._stage(Path(tmp))
            request = self._am_request(resources)
            self.submitted_at = time.time()
            self.submitted = True  # from here on an interruption must kill the application
            self.gw.call("submit the application", self.gw.bridge.submit, self.app_id, json.dumps(request))
            if self.stager.reused:
                self.say(f"reused from the cache (not uploaded): {', '.join(self.stager.reused)}")
            self.say(f"submitted {self.app_id}: {spec.framework}, "
                     + ", ".join(f"{t.instances} x {t.name}" for t in spec.types))
            if self.job.args.detach:
                keep_staging = True  # the AM deletes it when the job ends
                print(self.app_id, file=self.out)
                return 0
            self.monitor = Monitor(self.gw, self.app_id, quiet=self.job.args.quiet, out=self.out)
            return self.monitor.follow()
        except KeyboardInterrupt:
            if self.submitted:
                self.say(f"\ninterrupted: killing {self.app_id}")
                self._kill("killed by the TonY-py client (Ctrl-C)")
            return 130
        except BaseException:
            if self.submitted:
                self._kill("the TonY-py client failed")
            raise
        finally:
            if not keep_staging:
                self.stager.cleanup()

    def _kill(self, reason: str) -> None:
        try:
            self.gw.call("kill the application", self.gw.bridge.kill, self.app_id, reason)
        except TonyError as exc:
            print(f"tony: could not kill {self.app_id}: {exc}", file=sys.stderr)


def _interrupt(signum, _frame):
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None, prog: str = "tony submit") -> int:
    # A closed terminal or a `kill` ends the client like Ctrl-C: the application is killed.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, prog=prog)
        job = prepare(args)
        with ClientGateway() as gw:
            return Submission(gw, job).run()
    except TonyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
