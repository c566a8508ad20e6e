"""`tony submit` / `python -m tony_py.submit`: validate, stage, submit, follow.

Order matters for the no-leftovers promise: every check that can fail on bad input runs before
the application id is reserved and before anything is uploaded. From the moment something
exists on the cluster, any failure (or Ctrl-C) removes it again: the staging dir is deleted and
a submitted application is killed.
"""

from __future__ import annotations

import getpass
import json
import math
import os
import shlex
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from tony_py import appsecret, paths
from tony_py.am.launch import JAR_LINK, RUNTIME_LINK, JobMeta, docker_env, needs_hadoop_in_task
from tony_py.auth import Signer
from tony_py.bridge import jvm
from tony_py.bridge.gateway import ClientGateway
from tony_py.bridge.interrupts import guard
from tony_py.client.crash import report_unexpected
from tony_py.client.flags import SubmitArgs, parse_args
from tony_py.client.monitor import FINAL_STATES, Monitor
from tony_py.client.staging import Resource, Stager, build_runtime_zip, check_local_inputs, sha256_file, zip_src_dir
from tony_py.config.layers import TonyConf, load_conf
from tony_py.config.build import build_job_spec, parse_env_list
from tony_py.config.fit import check_fits
from tony_py.config.spec import SPEC_FILE, TENSORBOARD_TYPE, JobSpec
from tony_py.config import checks, keys
from tony_py.config.xmlconf import parse_xml, read_xml, to_xml
from tony_py.errors import ConfigError, TonyError, UsageError

AM_HEAP = "-Xmx256m"
AM_CLASS = "io.tonypy.am.ApplicationMaster"
VENV_LINK = "venv"
SRC_LINK = "tony_src.zip"
LIFETIME_GRACE_S = 60
KILL_WAIT_S = 20.0  # how long a killed application may take to end before its files are removed


@dataclass
class PreparedJob:
    args: SubmitArgs
    conf: TonyConf
    spec: JobSpec
    task_python: str
    warnings: list[str] = field(default_factory=list)  # keys TonY-py will not act on
    hadoop_conf_files: dict[str, str] = field(default_factory=dict)  # e.g. hdfs-site.xml -> local path


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
    for flag, value in (("--src_dir", args.src_dir), ("--python_venv", args.python_venv),
                        ("--conf_file", args.conf_file), ("--executes", (args.executes or "").split(" ")[0])):
        if value and "://" not in value:
            checks.local_path(flag, value)
    conf = load_conf(args.conf_file, args.conf)
    if args.sidecar_tensorboard_log_dir:  # TonY: the flag wins over the key
        conf.set("tony.application.tensorboard-log-dir", args.sidecar_tensorboard_log_dir,
                 "--sidecar_tensorboard_log_dir")
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
    task_python = python or conf.get("tony.executor.python") or "python3"
    spec = build_job_spec(conf, python=shlex.quote(task_python))
    check_local_inputs(args.src_dir, args.python_venv)
    if args.executes is not None and not args.executes.strip():
        raise UsageError("--executes: empty command")
    if args.executes and python and args.src_dir and Path(args.src_dir).is_dir():
        script = args.executes.split()[0]
        if not (Path(args.src_dir) / script).exists():
            raise UsageError(f"--executes {args.executes[:200]}: {script[:200]} is not in --src_dir {args.src_dir}")
    if args.hdfs_classpath:
        for entry in args.hdfs_classpath.split(","):
            if entry.strip() and "://" not in entry and not entry.strip().startswith("/"):
                raise UsageError(f"--hdfs_classpath {entry}: expected an absolute or hdfs:// directory")
    links = _check_resources(conf, spec)
    _check_src_dir(args.src_dir, RESERVED_LINKS | links)
    # Both interpreters end up inside YARN's launch script (the AM's in its environment).
    checks.launch_value("--python_binary_path" if python else "tony.executor.python", task_python,
                        what="interpreter path")
    checks.launch_value("tony.am.python", conf.get("tony.am.python") or "python3", what="interpreter path")
    _check_final_conf(conf)
    return PreparedJob(args, conf, spec, task_python, keys.review(conf, spec.type_names()), _hadoop_conf_files(conf))


HADOOP_CONF_KEYS = {"tony.application.hdfs-conf-path": "hdfs-site.xml",
                    "tony.application.yarn-conf-path": "yarn-site.xml",
                    "tony.application.mapred-conf-path": "mapred-site.xml"}


def _hadoop_conf_files(conf: TonyConf) -> dict[str, str]:
    """TonY's tony.application.{hdfs,yarn,mapred}-conf-path: Hadoop config files that override
    HADOOP_CONF_DIR's for this job (the client's JVM loads them; the AM gets copies)."""
    files = {}
    for key, name in HADOOP_CONF_KEYS.items():
        path = (conf.get(key) or "").strip()
        if path:
            if not Path(checks.local_path(key, path)).is_file():
                raise ConfigError(key, f"{path}: no such file", conf.origin(key))
            read_xml(path, key)  # a hostile or broken file is refused here, not in a JVM later
            files[name] = path
    return files


def _check_final_conf(conf: TonyConf) -> None:
    """tony-final.xml must give back exactly what was written: a value XML cannot hold would
    make every AM attempt fail after submission."""
    final = conf.resolved()
    for key, value in final.items():
        try:
            checks.xml_text(key, key)
            checks.xml_text(key, value)
        except ConfigError as exc:
            raise exc.with_origin(conf.origin(key)) from None
    back = parse_xml(to_xml(final), "tony-final.xml")
    for key, value in final.items():
        if back.get(key.strip()) != value.strip():
            raise ConfigError(key, f"{value[:80]!r} does not survive the round trip through tony-final.xml",
                              conf.origin(key))


def _check_src_dir(src_dir: str | None, reserved: frozenset[str] | set[str]) -> None:
    """A top-level entry of src_dir named like a localized resource would be unpacked over it."""
    if not src_dir or "://" in src_dir:
        return  # a remote zip is checked by the executor, which never writes through a link
    path = Path(src_dir)
    if path.is_dir():
        top = set(os.listdir(path))
    else:
        with zipfile.ZipFile(path) as zf:
            top = {name.split("/", 1)[0] for name in zf.namelist()}
    clash = sorted(top & set(reserved))
    if clash:
        raise UsageError(f"--src_dir {src_dir}: its top-level entry {clash[0]!r} has the name of a file TonY-py "
                         "puts into every container (the venv, the runtime, the job's config, a resource); "
                         "rename it")


RESERVED_LINKS = frozenset({VENV_LINK, RUNTIME_LINK, JAR_LINK, SRC_LINK, "tony-final.xml", "tony-job.json",
                            SPEC_FILE, appsecret.SECRET_FILE})


def _check_resources(conf: TonyConf, spec: JobSpec) -> set[str]:
    """Local resources exist, no two resources of a task share a name (or take one of ours),
    and every name can pass through YARN's launch script. Returns every link name."""
    common: dict[str, tuple] = {}
    every: set[str] = set()
    for key in ["tony.containers.resources"] + [f"tony.{t.name}.resources" for t in spec.types]:
        names = dict(common)
        for entry in (conf.get(key) or "").split(","):
            if not entry.strip():
                continue
            parsed = _parse_resource_entry(entry.strip())
            path, name, _ = parsed
            if "://" not in path and not Path(checks.local_path(key, path)).exists():
                raise UsageError(f"{key}: {path} does not exist")
            base = path.rstrip("/").rsplit("/", 1)[-1]
            link = name or base
            checks.link_name(key, base)  # the NodeManager's local copy keeps the file's own name
            checks.link_name(key, link)
            if names.get(link) == parsed:
                continue  # the same file listed twice (TonY: localized once)
            if link in RESERVED_LINKS or link in names:
                taken = "is reserved by TonY-py" if link in RESERVED_LINKS else "names two different files"
                raise UsageError(f"{key}: the name {link!r} {taken}; rename one with PATH::NAME")
            names[link] = parsed
        every |= set(names)
        if key == "tony.containers.resources":
            common = names
    return every


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
        self.secret: str | None = None

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

        for link, res in self._user_resources("tony.containers.resources", tmp):
            resources[link] = res
            task_links.append(link)
        type_links: dict[str, list[str]] = {}
        for task_type in self.job.spec.types:
            for link, res in self._user_resources(f"tony.{task_type.name}.resources", tmp):
                resources[link] = res
                type_links.setdefault(task_type.name, []).append(link)

        if needs_hadoop_in_task(self.job.spec):  # the sidecar mirrors a remote log dir with our jar
            type_links.setdefault(TENSORBOARD_TYPE, []).append(JAR_LINK)

        hdfs_cp = []
        for directory in (args.hdfs_classpath or "").split(","):
            if directory.strip():
                for path in self.gw.call("list --hdfs_classpath", self.gw.fs.listFiles, directory.strip()):
                    link = checks.link_name("--hdfs_classpath", path.rsplit("/", 1)[-1])
                    resources[link] = st.remote(path, "FILE")
                    task_links.append(link)
                    hdfs_cp.append(link)

        meta = JobMeta(
            app_id=self.app_id,
            staging_dir=st.staging_dir,
            user=getpass.getuser(),
            resources={},
            task_resources=task_links + ["tony-final.xml", SPEC_FILE, appsecret.SECRET_FILE],
            task_python=self.job.task_python,
            src_zip=src_zip,
            extra={"hdfs_classpath": hdfs_cp, "type_resources": type_links,
                   "hadoop_classpath": self._application_classpath()},
        )
        for name, local in self.job.hadoop_conf_files.items():  # first on the AM's classpath
            resources[name] = st.upload_private(Path(local), name)
        self.secret = appsecret.generate()
        resources[appsecret.SECRET_FILE] = st.write_text(appsecret.SECRET_FILE, self.secret, mode=0o600)
        final = self.job.conf.resolved()
        final["tony.application.id"] = self.app_id
        final["tony.executor.python"] = self.job.task_python
        resources["tony-final.xml"] = st.write_text("tony-final.xml", to_xml(final))
        resources[SPEC_FILE] = st.write_text(SPEC_FILE, json.dumps(self.job.spec.to_dict()))
        shipped = set(meta.task_resources).union(*type_links.values())
        meta.resources = {k: v.to_json() for k, v in resources.items() if k in shipped}
        resources["tony-job.json"] = st.write_text("tony-job.json", json.dumps(meta.to_json(), indent=1))
        return resources, meta

    def _user_resources(self, key: str, tmp: Path) -> list[tuple[str, Resource]]:
        """The entries of a resources key, each file once (empty and repeated entries skipped)."""
        out, seen = [], set()
        for entry in (self.job.conf.get(key) or "").split(","):
            entry = entry.strip()
            if entry and _parse_resource_entry(entry) not in seen:
                seen.add(_parse_resource_entry(entry))
                out += self._user_resource(entry, tmp, key)
        return out

    def _user_resource(self, entry: str, tmp: Path, key: str):
        """TonY's resource entries: remote paths are localized as they are, local files are
        uploaded, local directories are zipped and localized as archives."""
        path, name, archive = _parse_resource_entry(entry)
        if "://" in path:
            desc = self.gw.json(f"stat {path}", self.gw.fs.describe, path)
            if desc is not None and desc.get("directory") and not archive:
                # TonY: a remote directory contributes its files, each under its own name.
                files = self.gw.call(f"list {path}", self.gw.fs.listFiles, path)
                return [(checks.link_name(key, f.rsplit("/", 1)[-1]), self.stager.remote(f, "FILE")) for f in files]
            return [(name or path.rstrip("/").rsplit("/", 1)[-1], self.stager.remote(path, "ARCHIVE" if archive else "FILE"))]
        local = Path(path)
        if not local.exists():
            raise UsageError(f"{key}: {path} does not exist")
        if local.is_dir():
            zipped = zip_src_dir(local, tmp / f"res-{local.name}.zip")
            return [(name or local.name, self.stager.upload_private(zipped, f"{local.name}.zip", "ARCHIVE"))]
        return [(name or local.name, self.stager.upload_private(local, local.name, "ARCHIVE" if archive else "FILE"))]

    # ---- the AM ------------------------------------------------------------------------------
    def _application_classpath(self) -> list[str]:
        """Where containers find Hadoop: the cluster's yarn.application.classpath."""
        if not hasattr(self, "_app_classpath"):
            self._app_classpath = list(self.gw.call("read the application classpath",
                                                    self.gw.bridge.applicationClasspath))
        return self._app_classpath

    def _am_request(self, resources: dict[str, Resource], meta: JobMeta) -> dict:
        spec = self.job.spec
        classpath = ["{{PWD}}", "{{PWD}}/" + JAR_LINK] + self._application_classpath()
        am_resources = {k: resources[k].to_json()
                        for k in (JAR_LINK, RUNTIME_LINK, "tony-final.xml", SPEC_FILE, "tony-job.json",
                                  appsecret.SECRET_FILE)}
        am_resources.update({name: resources[name].to_json() for name in self.job.hadoop_conf_files})
        if spec.single_node:  # the AM's container runs the task: it needs the task's files too
            am_resources.update(meta.resources)
        java_opts = " ".join([AM_HEAP, *jvm.FAST_START_OPTS, *jvm.JDK17_OPENS])
        return {
            "name": spec.name,
            "queue": spec.queue,
            "type": spec.app_type,
            "tags": list(spec.tags) + ["tony-py"],
            "node_label": spec.node_label,
            "security": spec.security_enabled,
            "max_attempts": spec.am_max_attempts,
            "priority": spec.priority,
            # The RM ends the application a little after tony.application.timeout even if no client
            # or AM is left to do it (the AM's own timeout, with a clear reason, comes first).
            "lifetime_s": math.ceil(spec.timeout_ms / 1000) + LIFETIME_GRACE_S if spec.timeout_ms else 0,
            "other_namenodes": list(spec.other_namenodes),
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
                    **docker_env(spec, spec.docker_am_image),
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
        placements = [("tony.application.placement-spec", spec.placement_spec)]
        placements += [(f"tony.{t.name}.placement-spec", t.placement_spec) for t in spec.types]
        for key, expression in placements:
            error = expression and self.gw.call("check a placement spec", self.gw.bridge.placementError, expression)
            if error:
                raise ConfigError(key, f"{expression!r} is not a YARN placement constraint: {error}",
                                  self.job.conf.origin(key))

    def run(self) -> int:
        spec = self.job.spec
        self._check_cluster_inputs()
        self.app_id = self.gw.call("create an application", self.gw.bridge.createApplication)
        self.stager = Stager(self.gw, self.app_id, spec.cache_visibility,
                             warn=lambda text: print(f"tony: warning: {text}", file=sys.stderr))
        try:
            with tempfile.TemporaryDirectory(prefix="tony-submit-") as tmp:
                resources, meta = self._stage(Path(tmp))
            request = self._am_request(resources, meta)
            self.submitted_at = time.time()
            self.submitted = True  # from here on an interruption must kill the application
            self.gw.call("submit the application", self.gw.bridge.submit, self.app_id, json.dumps(request))
            if self.stager.reused:
                self.say(f"reused from the cache (not uploaded): {', '.join(self.stager.reused)}")
            self.say(f"submitted {self.app_id}: {spec.framework}, "
                     + ", ".join(f"{t.instances} x {t.name}" for t in spec.types))
            if self.job.args.detach:
                print(self.app_id, file=self.out)
                return 0  # the AM deletes the staging dir when the job ends
            signer = Signer(self.secret, f"client-{os.getpid()}")
            self.monitor = Monitor(self.gw, self.app_id, signer, quiet=self.job.args.quiet, out=self.out,
                                   startup_timeout_ms=spec.startup_timeout_ms)
            code = self.monitor.follow()
            with guard.cleanup():
                self.stager.cleanup()
            return code
        except KeyboardInterrupt as exc:
            with guard.cleanup():
                if self.submitted:
                    self.say(f"\ninterrupted ({exc or 'Ctrl-C'}): killing {self.app_id}")
                self._abort("killed by the TonY-py client (Ctrl-C)")
            return 130
        except BaseException:
            with guard.cleanup():
                self._abort("the TonY-py client failed")
            raise

    def _abort(self, reason: str) -> None:
        """Kill the application (if it was submitted), wait until YARN has ended it (its AM
        may still write to the staging dir while it dies), then remove the staging dir."""
        if self.submitted:
            try:
                self.gw.call("kill the application", self.gw.bridge.kill, self.app_id, reason)
                self._wait_final(KILL_WAIT_S)
            except TonyError as exc:
                print(f"tony: could not kill {self.app_id}: {exc}", file=sys.stderr)
        self.stager.cleanup()

    def _wait_final(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            report = self.gw.json("read the application report", self.gw.bridge.report, self.app_id)
            if report.get("state") in FINAL_STATES:
                return
            time.sleep(0.2)


def main(argv: list[str] | None = None, prog: str = "tony submit") -> int:
    # Ctrl-C, a closed terminal or a `kill` end the client the same way: the application is
    # killed. Never in the middle of a JVM bridge call (tony_py/bridge/interrupts.py).
    guard.install()
    try:
        args = parse_args(sys.argv[1:] if argv is None else argv, prog=prog)
        job = prepare(args)
        for warning in job.warnings:
            print(f"{prog}: warning: {warning}", file=sys.stderr)
        with ClientGateway(conf_files=list(job.hadoop_conf_files.values())) as gw:
            return Submission(gw, job).run()
    except TonyError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # noqa: BLE001 - never a raw traceback: one line and a file
        return report_unexpected(prog, exc)


if __name__ == "__main__":
    sys.exit(main())
