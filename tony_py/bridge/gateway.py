"""The one place the client starts its JVM and talks to it (Py4J).

The client's JVM holds Hadoop's YarnClient and FileSystem (io.tonypy.client.ClientBridge), so
submission uses the cluster's own client code, configuration and security. It is started with
py4j's GatewayServer (start_gateway_server): on loopback, with a fresh auth token, and it dies
with this process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import threading
import zipfile
from pathlib import Path

from py4j.java_gateway import GatewayParameters, JavaGateway
from py4j.protocol import Py4JError, Py4JJavaError

from tony_py import paths
from tony_py.bridge import cds, credentials, jvm
from tony_py.bridge.interrupts import guard
from tony_py import timeline
from tony_py.config.xmlconf import read_xml
from tony_py.errors import SetupError, TonyError

CLIENT_HEAP = "-Xmx384m"
GATEWAY_CLASS = "py4j/GatewayServer.class"  # in the shaded jar, not in Maven's original-*.jar

# An unreachable ResourceManager (a wrong HADOOP_CONF_DIR, an RM that is down) kept the client
# retrying for YARN's default 15 minutes of sleeps (30 s apart, each try itself retrying the
# connection ~10 times), deaf to Ctrl-C, since no signal interrupts a bridge call. With 2 minutes
# of sleeps 5 s apart (longer than an RM fail-over takes) the error came after 6 min (measured).
RM_CONNECT = {
    "yarn.resourcemanager.connect.max-wait.ms": "120000",
    "yarn.resourcemanager.connect.retry-interval.ms": "5000",
}
CLIENT_DEFAULTS = {**jvm.HDFS_CLOSE_RETRY, **RM_CONNECT}


def client_properties(conf_dir: Path, conf_files: list[str], properties: dict[str, str] | None) -> dict[str, str]:
    """The user's Hadoop properties, plus our defaults for keys no configuration file sets."""
    configured: set[str] = set()
    for path in [conf_dir / name for name in ("core-site.xml", "hdfs-site.xml", "yarn-site.xml")] + \
            [Path(f) for f in conf_files]:
        if path.is_file():
            try:
                configured.update(read_xml(path))
            except TonyError:
                pass  # an unreadable site file is Hadoop's to report, not ours
    defaults = {k: v for k, v in CLIENT_DEFAULTS.items() if k not in configured}
    return {**defaults, **(properties or {})}


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


def jvm_start_failure(jar: Path, exc: Exception, log_path: Path | None) -> str:
    """Why the client's JVM did not start, in words: py4j says "invalid literal for int()" when
    the JVM ends before printing its port (it could not even load py4j's GatewayServer)."""
    try:
        with zipfile.ZipFile(jar) as zf:
            zf.getinfo(GATEWAY_CLASS)
    except KeyError:
        return (f"{jar} is not the complete tony-py jar: it has no py4j (Maven's original-*.jar is the copy "
                "before shading); use tony-py-<version>.jar from the same target/ directory")
    except (OSError, zipfile.BadZipFile) as error:
        return f"{jar} is not a readable jar: {error}"
    if isinstance(exc, ValueError) and log_path is not None:
        lines = [line.strip() for line in log_path.read_text(errors="replace").splitlines() if line.strip()]
        return "the JVM ended at once" + (f": {lines[-1][:300]}" if lines else "")
    return str(exc)


def start_gateway_server(java: str, classpath: list[str], opts: list[str], log) -> tuple[int, str, subprocess.Popen]:
    """py4j's GatewayServer in a JVM: (port, auth token, process). What py4j's launch_gateway
    does, but the JVM's process group is made by Popen's process_group, not py4j's
    preexec_fn=os.setpgrp: with a preexec_fn the forked child runs Python (the interpreter's and
    every library's at-fork hooks) before its exec, and a lock some other thread of the parent
    held at the fork never comes free there; the client's JVM starts from a background thread
    while the main thread imports. Seen: CI's unit tier hung 600 s in that child, twice. Its own
    process group: a Ctrl-C in the terminal must reach only the client, which then needs the JVM
    to kill the application and clean up. --die-on-broken-pipe: the JVM ends when this process
    does (its stdin closes). A JVM that ends before printing its port raises ValueError
    (jvm_start_failure says why); the rest of its stdout goes to `log`, as its stderr."""
    command = [java, "-classpath", os.pathsep.join(classpath), *opts, "py4j.GatewayServer",
               "--die-on-broken-pipe", "--enable-auth", "0"]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, process_group=0)
    try:
        port = int(proc.stdout.readline())
        token = proc.stdout.readline().decode().rstrip("\r\n")
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    threading.Thread(target=_copy_output, args=(proc.stdout, log), name="tony-client-jvm-stdout", daemon=True).start()
    return port, token, proc


def _copy_output(stream, log) -> None:
    for line in iter(stream.readline, b""):
        try:
            log.write(line.decode(errors="replace"))
            log.flush()
        except ValueError:  # the log was closed: the client is done with the JVM
            return


class JvmLaunch:
    """The client's JVM starting, in the background when asked: its ~0.4 s then overlap the
    checks that need no cluster (open_gateway). result() waits and returns (conf dir, port,
    token, process) or raises SetupError; discard() stops a JVM nobody will use."""

    def __init__(self, background: bool = False) -> None:
        self.log_path: Path | None = None  # created just before the JVM starts
        self.log = None
        self._outcome: tuple | BaseException | None = None
        self.claimed = False  # a ClientGateway took the JVM over (and stops it)
        self.archive: cds.Archive | None = None
        self._thread = threading.Thread(target=self._run, name="tony-client-jvm", daemon=True)
        if background:
            self._thread.start()
        else:
            self._run()

    def _launch(self, jar: Path, classpath: list[str], cds_opts: list[str], user_opts: list[str]) -> tuple:
        env_opts = [
            CLIENT_HEAP,
            *jvm.FAST_START_OPTS,
            *jvm.module_opens(jvm.java_executable()),
            *cds_opts,
            "-Dlog4j.configuration=" + (paths.PACKAGE_DIR / "bridge" / "log4j-client.properties").as_uri(),
            *jvm.kerberos_opts(),
            *user_opts,
        ]
        try:
            return start_gateway_server(jvm.java_executable(), [str(jar), *classpath], env_opts, self.log)
        except Exception as exc:  # noqa: BLE001 - report how the JVM failed to start
            self.log.flush()
            raise SetupError(f"the client JVM did not start: {jvm_start_failure(jar, exc, self.log_path)} "
                             f"(see {self.log_path})") from None

    def _run(self) -> None:
        try:
            conf_dir = hadoop_conf_dir()
            jar = paths.locate_jar()
            # (py4j puts the jar first; the configuration directory goes last: cds.py)
            classpath = cds.classpath_order([str(conf_dir), *hadoop_classpath(conf_dir)])
            user_opts = jvm.client_opts()
            self.archive = cds.Archive(jvm.java_executable(), [str(jar), *classpath], user_opts)
            fd, log_path = tempfile.mkstemp(prefix="tony-client-jvm-", suffix=".log")
            self.log_path, self.log = Path(log_path), os.fdopen(fd, "w")
            try:
                port, token, proc = self._launch(jar, classpath, self.archive.options(), user_opts)
            except Exception:  # noqa: BLE001 - a JVM that would not write the archive runs without it
                if self.archive.dumping is None:
                    raise
                self.archive.finish(None, exited_cleanly=False)
                port, token, proc = self._launch(jar, classpath, [], user_opts)
            self._outcome = (conf_dir, port, token, proc)
        except BaseException as exc:  # noqa: BLE001 - handed to whoever waits in result()
            self._outcome = exc

    def result(self) -> tuple:
        if self._thread.ident is not None:
            self._thread.join()
        if isinstance(self._outcome, BaseException):
            if self.log is not None:
                self.log.close()  # kept: the error names it
            raise self._outcome
        return self._outcome

    def claim(self) -> tuple:
        """The started JVM, now the caller's to stop (a failed start stays ours to tidy)."""
        outcome = self.result()
        self.claimed = True
        return outcome

    def discard(self) -> None:
        """Stop the JVM unless a ClientGateway took it over; safe to call more than once."""
        if self.claimed:
            return
        self.claimed = True
        try:
            _, _, _, proc = self.result()
        except BaseException:  # noqa: BLE001 - nothing started, nothing to stop
            proc = None
        if proc is not None:
            proc.kill()
            proc.wait()
        if self.archive is not None:
            self.archive.finish(proc, exited_cleanly=False)
        if self.log is not None:
            self.log.close()
            self.log_path.unlink(missing_ok=True)  # nobody will read it: the input never got that far


def early_launch(argv: list[str]) -> JvmLaunch | None:
    """For `tony submit`: the JVM starts before the client's own imports (~0.35 s) and the
    checks, which it does not need. Not for --local (no JVM) or --help; a JVM started for
    input that turns out bad is stopped again (open_gateway)."""
    if not argv or any(a in ("--local", "-local", "-h", "--help") for a in argv):
        return None
    return JvmLaunch(background=True)


class ClientGateway:
    """A JVM with ClientBridge; use as a context manager (the JVM stops on exit)."""

    def __init__(self, conf_files: list[str] = (), properties: dict[str, str] | None = None,
                 launch: "JvmLaunch | None" = None, principal: str | None = None, keytab: str | None = None) -> None:
        launch = launch or JvmLaunch()
        self.conf_dir, port, token, self.proc = launch.claim()
        self.archive = launch.archive
        self.log_path, self._log = launch.log_path, launch.log
        self.gateway = JavaGateway(
            gateway_parameters=GatewayParameters(port=port, auth_token=token, auto_convert=True)
        )
        timeline.mark("jvm_started")
        with guard.shielded():
            try:
                files = self.gateway.new_array(self.gateway.jvm.java.lang.String, len(conf_files))
                for i, path in enumerate(conf_files):
                    files[i] = str(Path(path).resolve())
                props = client_properties(self.conf_dir, list(conf_files), properties)
                self.bridge = self.gateway.jvm.io.tonypy.client.ClientBridge(
                    files, json.dumps(props), principal, str(Path(keytab).resolve()) if keytab else None)
                self.fs = self.bridge.fs()
                timeline.mark("hadoop_client_ready")
                info = json.loads(self.bridge.credentialsJson())
            except (Py4JError, Py4JJavaError) as exc:
                message = java_error(exc)
                login_failed = bool(principal) and "login" in message.lower()
                self.close(keep_log=not login_failed)  # a refused login is said in full; other failures keep the log
                if login_failed:
                    raise credentials.CredentialsError(credentials.login_failure(principal, keytab, message)) from None
                raise SetupError(f"cannot reach the cluster: {message} (the client JVM's log: {self.log_path})") from None
        self.user = info.get("user")  # the cluster's name for us (a Kerberos principal's short name)
        trouble = credentials.problem(info, credentials.ticket_cache())
        if trouble:
            self.close()
            raise credentials.CredentialsError(trouble)

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

    def close(self, keep_log: bool = False) -> None:
        """Stop the JVM. Its log (Hadoop's client warnings) is removed unless asked to keep it,
        as after a failure, when it may explain one (an empty log explains nothing: it goes too)."""
        with guard.cleanup():
            self._close()
        try:
            if not keep_log or self.log_path.stat().st_size == 0:
                self.log_path.unlink(missing_ok=True)
        except OSError:
            pass

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
            clean = False
            try:
                self.proc.terminate()
                self.proc.wait(timeout=5)
                clean = True
            except Exception:  # noqa: BLE001
                self.proc.kill()
                self.proc.wait()
            if self.archive is not None:
                self.archive.finish(self.proc, exited_cleanly=clean)
        self._log.close()

    def __enter__(self) -> "ClientGateway":
        return self

    def __exit__(self, *exc) -> None:
        self.close(keep_log=exc[0] is not None)
