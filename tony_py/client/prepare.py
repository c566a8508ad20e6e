"""Everything about a submission that can be checked without a cluster: flags and config in, a
validated PreparedJob (spec, final config, interpreter, warnings) out, or a one-line UsageError.

Every check that can fail on bad input runs here, before the application id is reserved and
before anything is uploaded.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse

from tony_py import appsecret
from tony_py.bridge import credentials
from tony_py.am.launch import JAR_LINK, RUNTIME_LINK
from tony_py.client.flags import SubmitArgs
from tony_py.client.staging import check_local_inputs
from tony_py.config import checks, keys
from tony_py.config.build import build_job_spec
from tony_py.config.values import parse_env_list
from tony_py.config.layers import TonyConf, load_conf, parse_overrides
from tony_py.config.spec import SPEC_FILE, JobSpec
from tony_py.config.xmlconf import parse_xml, read_xml, to_xml
from tony_py.errors import ConfigError, UsageError

VENV_LINK = "venv"
SRC_LINK = "tony_src.zip"


@dataclass
class PreparedJob:
    args: SubmitArgs
    conf: TonyConf
    spec: JobSpec
    task_python: str
    warnings: list[str] = field(default_factory=list)  # keys TonY-py will not act on
    hadoop_conf_files: dict[str, str] = field(default_factory=dict)  # e.g. hdfs-site.xml -> local path
    hadoop_properties: dict[str, str] = field(default_factory=dict)  # --conf / -D keys outside tony.*


def python_for(args: SubmitArgs) -> str | None:
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
    python = python_for(args)
    parts = [shlex.quote(python), args.executes] if python else [args.executes]
    if args.task_params:
        parts.append(args.task_params)
    return " ".join(parts)


def local_paths(args: SubmitArgs) -> SubmitArgs:
    """TonY's path rules: no scheme, or file://, is a path on this machine (relative to the
    current directory); any other scheme is a Hadoop file system (hdfs://, gs://, …)."""
    changes = {}
    for name in ("src_dir", "python_venv", "conf_file", "hdfs_classpath", "sidecar_tensorboard_log_dir"):
        value = getattr(args, name)
        if value and value.startswith("file://") and name not in ("hdfs_classpath", "sidecar_tensorboard_log_dir"):
            changes[name] = urlparse(value).path
    return dataclasses.replace(args, **changes) if changes else args


def is_remote(path: str | None) -> bool:
    return bool(path) and "://" in path and not path.startswith("file://")


def fetch_conf_file(gw, args: SubmitArgs, workdir: Path) -> SubmitArgs:
    """A --conf_file on a Hadoop file system (TonY read it through Hadoop's FileSystem): a
    private local copy of it, read by the client's JVM."""
    if not is_remote(args.conf_file):
        return args
    if not gw.call(f"check --conf_file {args.conf_file}", gw.fs.exists, args.conf_file):
        raise UsageError(f"--conf_file {args.conf_file}: no such file on the cluster file system")
    local = workdir / Path(urlparse(args.conf_file).path).name
    local.write_text(gw.call(f"read --conf_file {args.conf_file}", gw.fs.readText, args.conf_file))
    return dataclasses.replace(args, conf_file=str(local))


def prepare(args: SubmitArgs, adjust: Callable[[TonyConf, SubmitArgs], None] | None = None) -> PreparedJob:
    """Everything that can be checked without a cluster; raises UsageError on bad input.
    `adjust` gives a front door its job's shape (`tony notebook`: tony_py/client/notebook.py)."""
    args = local_paths(args)
    if is_remote(args.conf_file):
        raise UsageError(f"--conf_file {args.conf_file}: a remote file must be fetched first (fetch_conf_file)")
    for flag, value in (("--src_dir", args.src_dir), ("--python_venv", args.python_venv),
                        ("--conf_file", args.conf_file), ("--executes", (args.executes or "").split(" ")[0])):
        if value and "://" not in value:
            checks.local_path(flag, value)
    for flag, value in (("--src_dir", args.src_dir), ("--python_venv", args.python_venv)):
        if is_remote(value):  # localized as is: its own name reaches the launch script (a local one is renamed)
            checks.link_name(flag, value.rstrip("/").rsplit("/", 1)[-1])
    conf = load_conf(args.conf_file, args.conf)
    if args.sidecar_tensorboard_log_dir:  # TonY: the flag wins over the key
        conf.set("tony.application.tensorboard-log-dir", args.sidecar_tensorboard_log_dir,
                 "--sidecar_tensorboard_log_dir")
    for flag, key, value in (("--principal", "tony.keytab.user", args.principal),
                             ("--keytab", "tony.keytab.location", args.keytab)):
        if value:  # the flag wins over the key
            conf.set(key, value, flag)
    credentials.check_keytab(conf.get("tony.keytab.user"), conf.get("tony.keytab.location"))
    for flag, key, values in (
        ("--shell_env", "tony.execution.envs", args.shell_env),
        ("--container_env", "tony.containers.envs", args.container_env),
    ):
        for value in values:
            parse_env_list(value, flag, for_yarn=flag == "--container_env")
            conf.set(key, value, flag, append=True)
    if adjust is not None:
        adjust(conf, args)
    command = compose_command(args)
    if command:
        conf.set("tony.containers.command", command, "--executes")
    python = python_for(args)
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
    hadoop_properties = hadoop_overrides(args.conf)
    return PreparedJob(args, conf, spec, task_python, keys.review(conf, spec.type_names()), _hadoop_conf_files(conf),
                       hadoop_properties)


def hadoop_overrides(pairs: list[str]) -> dict[str, str]:
    """Keys outside tony.* given on the command line (or as the jar's -D options) are Hadoop
    settings for the client, as `hadoop jar`'s generic options are."""
    return {k: v for k, v in parse_overrides(pairs).items() if not k.startswith("tony.")}


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
        for parsed in resource_entries(conf, key):
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


def resource_entries(conf: TonyConf, key: str) -> list[tuple[str, str | None, bool]]:
    """The entries of a resources key, parsed, each once (empty and repeated entries skipped)."""
    out: list[tuple[str, str | None, bool]] = []
    for entry in (conf.get(key) or "").split(","):
        parsed = parse_resource_entry(entry.strip()) if entry.strip() else None
        if parsed is not None and parsed not in out:
            out.append(parsed)
    return out


def final_conf(job: PreparedJob, app_id: str) -> dict[str, str]:
    """tony-final.xml: the resolved config plus what the AM and executors learn from it."""
    final = job.conf.resolved()
    final["tony.application.id"] = app_id
    final["tony.executor.python"] = job.task_python
    return final


def parse_resource_entry(entry: str) -> tuple[str, str | None, bool]:
    """TonY's `PATH[::NAME][#archive]`."""
    archive = entry.endswith("#archive")
    if archive:
        entry = entry[: -len("#archive")]
    path, _, name = entry.partition("::")
    return path.strip(), (name.strip() or None), archive
