"""TonY's command-line flags, in all of TonY's forms: `-executes x`, `--executes x`, `--executes=x`.

TonY parses with commons-cli's GnuParser; users' scripts pass single-dash long options, so
argparse gets both spellings of every flag. Usage errors exit with code 2 and name the flag.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from tony_py.errors import UsageError

FLAGS: tuple[tuple[str, str, str], ...] = (
    # (name, kind, help); kind: value | repeat | switch
    ("executes", "value", "the command or script each task runs (relative to src_dir)"),
    ("task_params", "value", "arguments appended to the command"),
    ("python_venv", "value", "a zipped Python virtualenv (local or remote); unzipped into ./venv"),
    ("python_binary_path", "value", "python to run `executes` with: relative to venv/, or absolute"),
    ("src_dir", "value", "directory whose contents are unpacked into each task's working dir"),
    ("shell_env", "repeat", "NAME=value for the user process (repeatable)"),
    ("container_env", "repeat", "NAME=value for the container (repeatable)"),
    ("conf_file", "value", "a tony.xml configuration file"),
    ("conf", "repeat", "key=value configuration override (repeatable)"),
    ("hdfs_classpath", "value", "comma-separated remote dirs whose files go on the tasks' CLASSPATH"),
    ("sidecar_tensorboard_log_dir", "value", "run a TensorBoard sidecar task on this log dir"),
    ("principal", "value", "Kerberos principal to log in as from --keytab (tony.keytab.user); without it the "
                           "ticket cache (kinit) or a scheduler's HADOOP_TOKEN_FILE_LOCATION is used"),
    ("keytab", "value", "keytab of --principal (tony.keytab.location)"),
)


@dataclass
class SubmitArgs:
    executes: str | None = None
    task_params: str | None = None
    python_venv: str | None = None
    python_binary_path: str | None = None
    src_dir: str | None = None
    shell_env: list[str] = field(default_factory=list)
    container_env: list[str] = field(default_factory=list)
    conf_file: str | None = None
    conf: list[str] = field(default_factory=list)
    hdfs_classpath: str | None = None
    sidecar_tensorboard_log_dir: str | None = None
    principal: str | None = None
    keytab: str | None = None
    detach: bool = False
    quiet: bool = False
    local: bool = False
    port: int | None = None  # `tony notebook` only: the local relay's port


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit code 2 (argparse's own code too)
        raise UsageError(f"{message} (see --help)")


def build_parser(prog: str = "tony submit", notebook: bool = False) -> argparse.ArgumentParser:
    parser = Parser(
        prog=prog,
        description=("Run JupyterLab (or the web server --executes starts) in a YARN container and relay it to "
                     "this machine (TonY's NotebookSubmitter flags)." if notebook else
                     "Submit a distributed training job to YARN (TonY-compatible flags)."),
        allow_abbrev=False,
        add_help=False,
    )
    # TonY's -help too (argparse would read it as -h with "elp")
    parser.add_argument("--help", "-help", "-h", action="help", help="show this help message and exit")
    for name, kind, help_text in FLAGS:
        spellings = [f"--{name}", f"-{name}"]
        if kind == "repeat":
            parser.add_argument(*spellings, dest=name, action="append", default=[], metavar="K=V", help=help_text)
        else:
            parser.add_argument(*spellings, dest=name, help=help_text)
    parser.add_argument("--detach", "-detach", action="store_true",
                        help="return once the job is submitted instead of following it")
    parser.add_argument("--quiet", "-quiet", action="store_true", help="print only the final result")
    parser.add_argument("--local", "-local", action="store_true",
                        help="run the whole job on this machine, without YARN, HDFS or a JVM (tasks as local "
                             "processes; the same config, env, restarts and exit codes)")
    if notebook:
        parser.add_argument("--port", "-port", type=int, help="the local port the notebook is relayed to, on "
                                                              "127.0.0.1 (default: a free one)")
    return parser


def parse_args(argv: list[str], prog: str = "tony submit", notebook: bool = False) -> SubmitArgs:
    ns = build_parser(prog, notebook).parse_args(argv)
    for name, value in vars(ns).items():
        for item in value if isinstance(value, list) else [value]:
            if isinstance(item, str):
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    # Python hands undecodable argv bytes over as lone surrogates, which no file
                    # or JVM call can carry: refuse them here, naming the flag.
                    raise UsageError(f"--{name}: {item!r} is not valid UTF-8") from None
    return SubmitArgs(**vars(ns))
