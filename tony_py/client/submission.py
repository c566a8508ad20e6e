"""Stage and submit one prepared job.

From the moment something exists on the cluster, any failure (or Ctrl-C) removes it again:
the staging dir is deleted and a submitted application is killed (and waited for, so its dying
AM cannot write into a staging dir that was just removed).
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import json
import math
import tempfile
import time
from pathlib import Path
from typing import Callable

from tony_py import appsecret, paths, timeline
from tony_py.am.launch import (JAR_LINK, JOB_META_FILE, RUNTIME_LINK, JobMeta, am_credential_files, docker_env,
                               job_file_delivery, needs_hadoop_in_task, simple_user)
from tony_py.bridge import cds, jvm
from tony_py.bridge.interrupts import guard
from tony_py.client.job import Job
from tony_py.bridge.gateway import BridgeError, ClientGateway, JvmLaunch, hadoop_conf_dir
from tony_py.client import preflight
from tony_py.client.flags import SubmitArgs
from tony_py.client.prepare import (SRC_LINK, VENV_LINK, PreparedJob, fetch_conf_file, final_conf,
                                    hadoop_overrides, is_remote, prepare, resource_entries)
from tony_py.client.staging import Resource, Stager, runtime_zip, sha256_file, zip_src_dir
from tony_py.config import checks
from tony_py.config.fit import check_fits
from tony_py.config.spec import FINAL_CONF_FILE, SPEC_FILE, TENSORBOARD_TYPE
from tony_py.config.layers import TonyConf
from tony_py.config.xmlconf import to_xml
from tony_py.errors import ConfigError, UsageError
from tony_py.history import layout as history_layout

AM_HEAP = "-Xmx256m"
AM_CLASS = "io.tonypy.am.ApplicationMaster"
KEYTAB_LINK = "tony.keytab"  # TokenRenewal.KEYTAB_FILE
LIFETIME_GRACE_S = 60


def open_gateway(args: SubmitArgs, workdir: Path, launch: JvmLaunch | None = None,
                 adjust: Callable[[TonyConf, SubmitArgs], None] | None = None) -> tuple[ClientGateway, PreparedJob]:
    """Prepare the job and start the client's JVM for it (the caller closes it). The JVM starts
    in the background (from the entry point, early_launch, or here) while the job is checked:
    it needs nothing from the checks until the bridge is created with the job's Hadoop
    properties. A config file on the cluster is fetched first, through that JVM."""
    launch = launch or JvmLaunch(background=True)
    early = None
    try:
        if is_remote(args.conf_file):
            early, launch = ClientGateway(properties=hadoop_overrides(args.conf), launch=launch,
                                          principal=args.principal, keytab=args.keytab), None
        prepared = prepare(fetch_conf_file(early, args, workdir) if early else args, adjust)
        timeline.mark("validated")
        preflight.check_cluster(hadoop_conf_dir())  # a cluster there, of a release TonY-py runs on
    except BaseException:
        with guard.cleanup():
            if early is not None:
                early.close()
            if launch is not None:
                launch.discard()  # bad input leaves no process behind
        raise
    if early is not None:
        if not prepared.hadoop_conf_files:
            return early, prepared
        early.close()  # the fetched config names Hadoop files: a JVM that loads them
    return ClientGateway(conf_files=list(prepared.hadoop_conf_files.values()),
                         properties=prepared.hadoop_properties, launch=launch,
                         principal=prepared.conf.get("tony.keytab.user") or None,
                         keytab=prepared.conf.get("tony.keytab.location") or None), prepared


# A recovered RM (a restart, a fail-over) counts only the NodeManagers that registered again since.
NODES_REGISTER_WAIT_S = 20.0


class Submission:
    def __init__(self, gw, job: PreparedJob, warn: Callable[[str], None] = lambda text: None):
        self.gw = gw
        self.job = job
        self.warn = warn
        self.app_id: str | None = None
        self.stager: Stager | None = None
        self.submitted = False
        self.secret: str | None = None
        self.am_secret_keys: dict[str, bytes] = {}  # what the AM's credentials carry besides tokens
        self._reattach_files: dict[str, str] = {}  # staged once submitted (_stage_for_reattach)
        self._app_classpath: list[str] | None = None
        self.kerberos = False
        self.tokens_end_ms = 0  # without a keytab on a Kerberos cluster: when the job's tokens die

    def submit(self) -> Job:
        """Check the cluster, stage, submit; the handle of the running application."""
        spec = self.job.spec
        self._check_cluster_inputs()
        timeline.mark("cluster_checked")
        self.app_id = self.gw.call("create an application", self.gw.bridge.createApplication)
        timeline.mark("application_created")
        self.stager = Stager(self.gw, self.app_id, spec.cache_visibility, warn=self.warn)
        try:
            with tempfile.TemporaryDirectory(prefix="tony-submit-") as tmp:
                resources, meta = self._stage(Path(tmp))
            timeline.mark("staged")
            request = self._am_request(resources, meta)
            self.gw.call("submit the application", self._submit, json.dumps(request))
            if self.kerberos and KEYTAB_LINK not in resources:
                self.tokens_end_ms = self.gw.call("read the tokens' lifetime", self.gw.bridge.tokensEndMs)
            timeline.mark("submitted")
            self._stage_for_reattach(resources)
            timeline.mark("staged_for_reattach")
            return Job(self.gw, self.app_id, self.secret, self.stager.staging_dir)
        except BaseException as exc:
            with guard.cleanup():
                if self.submitted:
                    reason = "killed by the TonY-py client (Ctrl-C)" if isinstance(exc, KeyboardInterrupt) \
                        else "the TonY-py client failed"
                    try:
                        Job(self.gw, self.app_id, None, self.stager.staging_dir).kill(reason)
                    except BridgeError as kill_error:  # no RM took it: say so, keep the first error
                        self.warn(f"could not kill {self.app_id} ({kill_error}); if YARN accepted it, "
                                  f"`yarn application -kill {self.app_id}` ends it")
                else:
                    self.stager.cleanup()
            raise

    def _submit(self, request: str) -> None:
        """In the bridge call, where no Ctrl-C lands: from here an interruption kills the application
        (set before the call, a Ctrl-C in between had the client kill, and name, one YARN never got)."""
        self.submitted = True
        self.gw.bridge.submit(self.app_id, request)

    @property
    def reused(self) -> list[str]:
        return self.stager.reused if self.stager else []

    # ---- checks that need the cluster, still before anything is created on it ----------------------
    def _check_fits(self) -> None:
        """check_fits on the RUNNING nodes; asked again for a while (NODES_REGISTER_WAIT_S) while
        there are none, or while the job does not fit a cluster with two RMs (a job too large
        for any of its nodes is refused that much later there)."""
        deadline = time.monotonic() + NODES_REGISTER_WAIT_S
        while True:
            cluster = self.gw.json("read the cluster's nodes", self.gw.bridge.clusterJson)
            try:
                return check_fits(self.job.spec, cluster)
            except (ConfigError, UsageError):
                if not (cluster.get("ha") or not cluster.get("nodes")) or time.monotonic() > deadline:
                    raise
            time.sleep(1.0)

    def _check_cluster_inputs(self) -> None:
        spec, args = self.job.spec, self.job.args
        self._check_fits()
        if not self.gw.call("look up the queue", self.gw.bridge.queueExists, spec.queue):
            raise ConfigError("tony.yarn.queue", f"the scheduler has no queue {spec.queue!r}")
        for flag, path in (("--src_dir", args.src_dir), ("--python_venv", args.python_venv)):
            if path and "://" in path:
                desc = self.gw.json(f"check {flag}", self.gw.fs.describe, path)
                if desc is None:
                    raise UsageError(f"{flag} {path}: no such file on the cluster file system")
                if desc.get("directory"):
                    raise UsageError(f"{flag} {path}: a directory on the cluster file system; give a zip of it (a "
                                     "local directory is zipped for you)")
        placements = [("tony.application.placement-spec", spec.placement_spec)]
        placements += [(f"tony.{t.name}.placement-spec", t.placement_spec) for t in spec.types]
        for key, expression in placements:
            error = expression and self.gw.call("check a placement spec", self.gw.bridge.placementError, expression)
            if error:
                raise ConfigError(key, f"{expression!r} is not a YARN placement constraint: {error}",
                                  self.job.conf.origin(key))

    # ---- staging ---------------------------------------------------------------------------
    def _stage(self, tmp: Path) -> tuple[dict[str, Resource], JobMeta]:
        self.stager.create_dirs()
        resources: dict[str, Resource] = {}
        task_links: list[str] = []
        src_zip = self._stage_code(tmp, resources, task_links)
        kerberos = self.kerberos = self.gw.call("check the cluster's authentication", self.gw.bridge.securityEnabled)
        # The secret reaches task containers in their credentials; the spec, tony-final.xml and
        # src_dir from the AM or, on a Kerberos cluster or when too large, by localization.
        files_from_am, src_from_am, localized = job_file_delivery(
            kerberos, self.job.spec.single_node, src_zip, resources[SRC_LINK].size if src_zip else 0,
            len(self.job.spec.tasks()))
        task_links += localized
        type_links, hdfs_cp = self._stage_resources(tmp, resources, task_links)
        meta = JobMeta(
            app_id=self.app_id, staging_dir=self.stager.staging_dir, user=self.gw.user or simple_user(),
            resources={}, task_resources=task_links, task_python=self.job.task_python, src_zip=src_zip,
            files_from_am=files_from_am, src_from_am=src_from_am,
            src_path=resources[SRC_LINK].path if src_from_am else None,
            extra={"hdfs_classpath": hdfs_cp, "type_resources": type_links,
                   "hadoop_classpath": self._application_classpath(), "kerberos": kerberos},
        )
        self._stage_job_files(resources, meta, type_links)
        return resources, meta

    def _stage_code(self, tmp: Path, resources: dict[str, Resource], task_links: list[str]) -> str | None:
        """TonY-py's runtime and jar, the venv and the src_dir; the src_dir's link, if any."""
        args, st = self.job.args, self.stager
        runtime = runtime_zip(tmp / "runtime.zip")
        resources[RUNTIME_LINK] = st.upload_cached(
            runtime, f"tony-runtime-{sha256_file(runtime, remember=runtime.parent != tmp)[:20]}.zip", "ARCHIVE")
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
        if not args.src_dir:
            return None
        if "://" in args.src_dir:
            resources[SRC_LINK] = st.remote(args.src_dir, "FILE")
        else:
            src = Path(args.src_dir)
            local = src if src.is_file() else zip_src_dir(src, tmp / "src.zip")
            resources[SRC_LINK] = st.upload_private(local, f"tony_src_{self.app_id}.zip")
        return SRC_LINK

    def _stage_resources(self, tmp: Path, resources: dict[str, Resource],
                         task_links: list[str]) -> tuple[dict[str, list[str]], list[str]]:
        """The user's resources (for every task, and per type) and --hdfs_classpath's files."""
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
        for directory in (self.job.args.hdfs_classpath or "").split(","):
            if directory.strip():
                for path in self.gw.call("list --hdfs_classpath", self.gw.fs.listFiles, directory.strip()):
                    link = checks.link_name("--hdfs_classpath", path.rsplit("/", 1)[-1])
                    resources[link] = self.stager.remote(path, "FILE")
                    task_links.append(link)
                    hdfs_cp.append(link)
        return type_links, hdfs_cp

    def _stage_job_files(self, resources: dict[str, Resource], meta: JobMeta, type_links: dict[str, list[str]]) -> None:
        """The AM's own files: the cluster's site files, the secret, tony-final.xml, the spec, the
        job's metadata (which names what each task localizes)."""
        st = self.stager
        for name, local in self.job.hadoop_conf_files.items():  # first on the AM's classpath
            resources[name] = st.upload_private(Path(local), name)
        self.secret = appsecret.generate()
        keytab = self.job.conf.get("tony.keytab.location")
        if self.kerberos and keytab:  # the AM's only: it renews the job's tokens with it (TokenRenewal.java)
            resources[KEYTAB_LINK] = st.upload_private(Path(keytab), KEYTAB_LINK)
        intermediate, finished = history_layout.roots(self.job.conf.get, st.home)
        spec = dataclasses.replace(self.job.spec, history_intermediate=intermediate, history_finished=finished)
        files = {FINAL_CONF_FILE: to_xml(final_conf(self.job, self.app_id)), SPEC_FILE: json.dumps(spec.to_dict())}
        if not meta.files_from_am:  # task containers localize these two (jobfiles.py)
            for name, text in files.items():
                resources[name] = st.write_text(name, text)
        shipped = set(meta.task_resources).union(*type_links.values())
        meta.resources = {k: v.to_json() for k, v in resources.items() if k in shipped}
        files[JOB_META_FILE] = json.dumps(meta.to_json())
        self._reattach_files = {appsecret.SECRET_FILE: self.secret, FINAL_CONF_FILE: files[FINAL_CONF_FILE]}
        # The AM's job files and the secret travel in the AM's credentials (appsecret.py): its
        # container then starts without a localizer, unless it has files of its own to localize
        # (site files, a keytab, a single-node job's task files) or these are too large.
        self.am_secret_keys = {appsecret.CREDENTIALS_ALIAS: self.secret.encode()}
        in_credentials = am_credential_files(files)
        if in_credentials is None:  # too large: staged and localized
            resources.update({name: st.write_text(name, text) for name, text in files.items() if name not in resources})
        self.am_secret_keys.update(in_credentials or {})

    def _stage_for_reattach(self, resources: dict[str, Resource]) -> None:
        """The secret (0600) and tony-final.xml, for the owner's `tony logs`, `tony advise` and
        `api.attach`; once the AM is submitted (it has its own copies): off the start's path."""
        for name, text in self._reattach_files.items():
            if name in resources:  # staged already, for task containers or the AM to localize
                continue
            try:
                self.stager.write_text(name, text, localized=False)
            except BridgeError as exc:
                self.warn(f"cannot stage {name} for tony logs, tony advise and api.attach ({exc}); "
                          "they will show task states only")

    def _user_resources(self, key: str, tmp: Path) -> list[tuple[str, Resource]]:
        """The entries of a resources key, each file once (empty and repeated entries skipped)."""
        return [resource for entry in resource_entries(self.job.conf, key)
                for resource in self._user_resource(*entry, tmp, key)]

    def _user_resource(self, path: str, name: str | None, archive: bool, tmp: Path,
                       key: str) -> list[tuple[str, Resource]]:
        """TonY's resource entries: remote paths are localized as they are (a remote directory
        contributes its files), local files are uploaded, local directories are zipped and
        localized as archives."""
        if "://" in path:
            desc = self.gw.json(f"stat {path}", self.gw.fs.describe, path)
            if desc is not None and desc.get("directory") and not archive:
                files = self.gw.call(f"list {path}", self.gw.fs.listFiles, path)
                return [(checks.link_name(key, f.rsplit("/", 1)[-1]), self.stager.remote(f, "FILE")) for f in files]
            return [(name or path.rstrip("/").rsplit("/", 1)[-1],
                     self.stager.remote(path, "ARCHIVE" if archive else "FILE"))]
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
        if self._app_classpath is None:
            self._app_classpath = list(self.gw.call("read the application classpath",
                                                    self.gw.bridge.applicationClasspath))
        return self._app_classpath

    def _token_file_systems(self) -> list[str]:
        """Every file system the job touches besides the default one: staging, history,
        tony.other.namenodes, a remote venv or src_dir (TonY's TonyClient.getTokens)."""
        spec, args = self.job.spec, self.job.args
        places = [self.stager.staging_dir, *spec.other_namenodes]
        places += [p for p in (args.python_venv, args.src_dir) if p and "://" in p]
        places += history_layout.roots(self.job.conf.get, "")  # their own file systems, if named
        return list(dict.fromkeys(p for p in places if p))

    def _renewal_env(self, resources: dict[str, Resource]) -> dict[str, str]:
        """With a keytab: whom the AM logs in as, and which file systems it renews tokens for."""
        if KEYTAB_LINK not in resources:
            return {}
        return {"TONY_KEYTAB_PRINCIPAL": self.job.conf.get("tony.keytab.user"),
                # base64: a launch script's export mangles JSON's quotes and commas
                "TONY_TOKEN_FILE_SYSTEMS": base64.b64encode(
                    json.dumps({"file_systems": self._token_file_systems()}).encode()).decode()}

    def _am_request(self, resources: dict[str, Resource], meta: JobMeta) -> dict:
        spec = self.job.spec
        # The container's directory (the staged site files) before the cluster's own conf dir, and
        # every directory after the last jar: the JDK archives classes only then (cds.py).
        classpath = cds.classpath_order(["{{PWD}}", "{{PWD}}/" + JAR_LINK] + self._application_classpath())
        am_resources = {k: resources[k].to_json() for k in (JAR_LINK, RUNTIME_LINK)}
        if appsecret.FILE_ALIAS_PREFIX + JOB_META_FILE not in self.am_secret_keys:  # too large: localized
            am_resources.update({k: resources[k].to_json() for k in (FINAL_CONF_FILE, SPEC_FILE, JOB_META_FILE)})
        am_resources.update({name: resources[name].to_json() for name in self.job.hadoop_conf_files})
        if KEYTAB_LINK in resources:
            am_resources[KEYTAB_LINK] = resources[KEYTAB_LINK].to_json()
        if spec.single_node:  # the AM's container runs the task: it needs the task's files too
            am_resources.update(meta.resources)
        java_opts = " ".join([AM_HEAP, *jvm.FAST_START_OPTS, *jvm.JDK17_OPENS])
        start_jvm = f"bash {{{{PWD}}}}/{RUNTIME_LINK}/tony_py/am/start_jvm.sh "
        # The AM's class-data archive on each node (tony_py/am/start_jvm.sh): named here by the JVM's
        # options; the script adds what it finds on the node (java, the jars). Not for an AM in a
        # Docker image: what it writes outside its mounts dies with its container, so every AM
        # would pay the writing and none the gain.
        archive = "" if not spec.am_cds or spec.docker_am_image else \
            f"am-{hashlib.sha256(java_opts.encode()).hexdigest()[:16]}.jsa"
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
            # On a Kerberos cluster the AM gets a delegation token for each (and the default FS).
            "token_file_systems": self._token_file_systems(),
            # A new AM attempt re-adopts the running tasks instead of starting over.
            "keep_containers": True,
            "memory_mb": spec.am.memory_mb,
            "vcores": spec.am.vcores,
            "gpus": spec.am.gpus,
            "secret_keys": {alias: base64.b64encode(value).decode() for alias, value in self.am_secret_keys.items()},
            "launch": {
                "resources": am_resources,
                "env": {
                    "CLASSPATH": "<CPS>".join(classpath),
                    "PYTHONPATH": f"{{{{PWD}}}}/{RUNTIME_LINK}:{{{{PWD}}}}/{RUNTIME_LINK}/deps",
                    "PYTHONUNBUFFERED": "1",
                    "TONY_AM_PYTHON": self.job.conf.get("tony.am.python") or "python3",
                    "TONY_AM_CDS": archive,
                    **self._renewal_env(resources),
                    **docker_env(spec, spec.docker_am_image),
                },
                # (an AM in a Docker image starts its JVM itself: the image need not have bash)
                "commands": [f"{'' if spec.docker_am_image else start_jvm}{{{{JAVA_HOME}}}}/bin/java {java_opts} "
                             f"{AM_CLASS} 1><LOG_DIR>/am.log 2>&1"],
            },
        }
