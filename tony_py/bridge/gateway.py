"""The one place the client starts its JVM and talks to it (Py4J).

The client's JVM holds Hadoop's YarnClient and FileSystem (io.tonypy.client.ClientBridge), so
submission uses the cluster's own client code, configuration and security. It is started with
py4j.launch_gateway: on loopback, with a fresh auth token, and it dies with this process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from py4j.java_gateway import GatewayParameters, JavaGateway, launch_gateway
from py4j.protocol import Py4JError, Py4JJavaError

from tony_py import paths
from tony_py.bridge import jvm
from tony_py.bridge.interrupts import guard
from tony_py.config.xmlconf import read_xml
from tony_py.errors import SetupError, TonyError

CLIENT_HEAP = "-Xmx384m"


class BridgeError(TonyError):
    """A Hadoop call failed; the message carries the Java exception's own words."""


def hadoop_conf_dir() -> Path:
    conf = os.environ.get("HADOOP_CONF_DIR")
    if conf and Path(conf).is_dir():
        return Path(conf)
    if Path("/etc/hadoop/conf").is_dir():
        return Path("/etc/hadoop/conf")
    raise SetupError(
        "HADOOP_CONF_DIR is not set (and there is no /etc/hadoop/conf): point it at your cluster's "
        "client configuration (`tony cluster up` prints the one of the local cluster)"
    )


def hadoop_classpath(conf_dir: Path) -> list[str]:
    """Hadoop's client jars: TONY_HADOOP_CLASSPATH, else `hadoop classpath --glob`, else the
    cluster's yarn.application.classpath when its entries exist on this machine."""
    explicit = os.environ.get("TONY_HADOOP_CLASSPATH")
    if explicit:
        return [p for p in explicit.split(os.pathsep) if p]
    hadoop = shutil.which("hadoop")
    if hadoop:
        out = subprocess.run([hadoop, "classpath", "--glob"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            return [p for p in out.stdout.strip().split(os.pathsep) if p]
    yarn_site = conf_dir / "yarn-site.xml"
    if yarn_site.is_file():
        entries = read_xml(yarn_site).get("yarn.application.classpath", "")
        local = [e.strip() for e in entries.split(",") if e.strip()]
        if local and all(Path(e.rstrip("*")).exists() for e in local):
            return local
    raise SetupError(
        "cannot find Hadoop's jars: put `hadoop` on PATH or set TONY_HADOOP_CLASSPATH "
        "(a classpath with the Hadoop client jars)"
    )


def java_error(exc: Exception) -> str:
    """The Java exception and its causes, in one line (without failing if the JVM is gone)."""
    if isinstance(exc, Py4JJavaError):
        try:
            text = str(exc.java_exception.toString())
            cause = exc.java_exception.getCause()
            while cause is not None:
                text += f"; caused by {cause.toString()}"
                cause = cause.getCause()
            return text
        except Py4JError:
            pass
    return str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__


class ClientGateway:
    """A JVM with ClientBridge; use as a context manager (the JVM stops on exit)."""

    def __init__(self, conf_files: list[str] = (), properties: dict[str, str] | None = None) -> None:
        self.conf_dir = hadoop_conf_dir()
        classpath = [str(self.conf_dir), *hadoop_classpath(self.conf_dir)]
        jar = paths.locate_jar()
        fd, log_path = tempfile.mkstemp(prefix="tony-client-jvm-", suffix=".log")
        self.log_path = Path(log_path)
        self._log = os.fdopen(fd, "w")
        env_opts = [
            CLIENT_HEAP,
            *jvm.FAST_START_OPTS,
            *jvm.JDK17_OPENS,
            "-Dlog4j.configuration=" + (paths.PACKAGE_DIR / "bridge" / "log4j-client.properties").as_uri(),
        ]
        try:
            port, token, self.proc = launch_gateway(
                jarpath=str(jar),
                classpath=os.pathsep.join(classpath),
                javaopts=env_opts,
                java_path=jvm.java_executable(),
                die_on_exit=True,
                # Its own process group: a Ctrl-C in the terminal must reach only the client,
                # which then needs the JVM to kill the application and clean up.
                create_new_process_group=True,
                redirect_stdout=self._log,
                redirect_stderr=self._log,
                enable_auth=True,
                return_proc=True,
            )
        except Exception as exc:  # noqa: BLE001 - report how the JVM failed to start
            raise SetupError(f"the client JVM did not start: {exc} (see {self.log_path})") from None
        self.gateway = JavaGateway(
            gateway_parameters=GatewayParameters(port=port, auth_token=token, auto_convert=True)
        )
        with guard.shielded():
            try:
                files = self.gateway.new_array(self.gateway.jvm.java.lang.String, len(conf_files))
                for i, path in enumerate(conf_files):
                    files[i] = str(Path(path).resolve())
                self.bridge = self.gateway.jvm.io.tonypy.client.ClientBridge(files, json.dumps(properties or {}))
                self.fs = self.bridge.fs()
            except (Py4JError, Py4JJavaError) as exc:
                message = java_error(exc)
                self.close()
                raise SetupError(f"cannot reach the cluster: {message}") from None

    def call(self, what: str, fn, *args):
        """Run a bridge call, turning a Java exception into a one-line TonyError. A Ctrl-C
        meanwhile is raised once the call has returned (tony_py/bridge/interrupts.py)."""
        with guard.shielded():
            try:
                return fn(*args)
            except (Py4JError, Py4JJavaError) as exc:
                raise BridgeError(f"{what}: {java_error(exc)}") from None

    def json(self, what: str, fn, *args):
        raw = self.call(what, fn, *args)
        return None if raw is None else json.loads(raw)

    def close(self) -> None:
        with guard.cleanup():
            self._close()

    def _close(self) -> None:
        try:
            if hasattr(self, "bridge"):
                self.bridge.close()
        except Exception:  # noqa: BLE001 - shutting down anyway
            pass
        try:
            self.gateway.shutdown()
        except Exception:  # noqa: BLE001
            pass
        if getattr(self, "proc", None) is not None:
            try:
                self.proc.terminate()
                self.proc.wait(timeout=5)
            except Exception:  # noqa: BLE001
                self.proc.kill()
        self._log.close()

    def __enter__(self) -> "ClientGateway":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        if exc[0] is None:
            self.log_path.unlink(missing_ok=True)
