"""Where the JVM is and how every TonY-py JVM is started.

One place for the JDK 17 module flags so the cluster daemons, the client's gateway JVM and
the ApplicationMaster's JVM cannot drift apart.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from tony_py.errors import SetupError

# Hadoop 3.4's launcher scripts add these (hadoop_finalize_jpms_opts). Without
# java.lang opened, Guice in the YARN web apps dies at start on JDK 17. Unknown options are
# ignored on older JDKs thanks to IgnoreUnrecognizedVMOptions, so the list is safe on 11.
JDK17_OPENS: tuple[str, ...] = (
    "-XX:+IgnoreUnrecognizedVMOptions",
    "--add-opens=java.base/java.io=ALL-UNNAMED",
    "--add-opens=java.base/java.lang=ALL-UNNAMED",
    "--add-opens=java.base/java.lang.reflect=ALL-UNNAMED",
    "--add-opens=java.base/java.math=ALL-UNNAMED",
    "--add-opens=java.base/java.net=ALL-UNNAMED",
    "--add-opens=java.base/java.text=ALL-UNNAMED",
    "--add-opens=java.base/java.util=ALL-UNNAMED",
    "--add-opens=java.base/java.util.concurrent=ALL-UNNAMED",
    "--add-opens=java.base/java.util.zip=ALL-UNNAMED",
    "--add-opens=java.base/sun.security.util=ALL-UNNAMED",
    "--add-opens=java.base/sun.security.x509=ALL-UNNAMED",
)

# Short-lived or lightly loaded JVMs start faster with C1 only and the serial collector.
FAST_START_OPTS: tuple[str, ...] = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-Xss512k",
    "-Djava.net.preferIPv4Stack=true",
)


def java_home() -> Path:
    """JAVA_HOME, else the JDK that the `java` on PATH belongs to."""
    env = os.environ.get("JAVA_HOME")
    if env and (Path(env) / "bin" / "java").exists():
        return Path(env)
    java = shutil.which("java")
    if not java:
        raise SetupError("no Java found: install a JDK or JRE (8 or newer) or set JAVA_HOME")
    return Path(java).resolve().parent.parent


def checked_java_home(path: str) -> Path:
    """A JAVA_HOME given explicitly (`tony cluster up --java-home`): it must hold bin/java."""
    home = Path(path).expanduser().resolve()
    if not os.access(home / "bin" / "java", os.X_OK):
        raise SetupError(f"--java-home {path}: no executable bin/java in it (give a JDK's or JRE's home)")
    return home


def java_major(java: str | Path) -> int:
    """The Java release of a java binary (8, 11, 17, …), from its runtime's `release` file
    (JAVA_VERSION="1.8.0_402" or "11.0.13"), else from what `java -version` prints."""
    home = Path(java).resolve().parents[1]
    try:
        text = (home / "release").read_text()
    except OSError:
        text = subprocess.run([str(java), "-version"], capture_output=True, text=True, timeout=60).stderr
    m = re.search(r'(?:JAVA_VERSION=|version )"(1\.)?(\d+)', text)
    if not m:
        raise SetupError(f"cannot tell which Java {java} is")
    return int(m.group(2))


def module_opens(java: str | Path) -> tuple[str, ...]:
    """JDK17_OPENS for a Java 9+ binary; nothing for Java 8, which refuses --add-opens."""
    return JDK17_OPENS if java_major(java) >= 9 else ()


def java_executable() -> str:
    return str(java_home() / "bin" / "java")


# Closing an HDFS file waits until the NameNode has the last block; the client retries after
# 400 ms, doubling, 5 times (HdfsClientConfigKeys.BlockWrite). A small file usually needs one
# short wait, so with the default each small file written cost 0.4 s (measured: 0.42 s of
# 0.44 s per write: the client's 4-5 staged files, the AM's first history files on the way to
# registering, every snapshot). The same patience in total (~12.7 s), in finer steps. Only
# where neither the cluster's hdfs-site.xml nor the user sets them: the client JVM
# (gateway.client_properties) and the AM's (AmBridge.defaultsUnlessConfigured).
HDFS_CLOSE_RETRY = {
    "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "50",
    "dfs.client.block.write.locateFollowingBlock.retries": "8",
}


def kerberos_opts(env: dict[str, str] | None = None) -> list[str]:
    """The JDK does not read KRB5_CONFIG (MIT's variable): a JVM of ours given one is told
    where the realm's krb5.conf is, as the Hadoop scripts do with HADOOP_OPTS."""
    path = (os.environ if env is None else env).get("KRB5_CONFIG")
    return [f"-Djava.security.krb5.conf={path}"] if path else []


def client_opts(env: dict[str, str] | None = None) -> list[str]:
    """HADOOP_CLIENT_OPTS, as `hadoop jar` and the other client commands honour it (after ours,
    so a user's -D wins)."""
    return shlex.split((os.environ if env is None else env).get("HADOOP_CLIENT_OPTS", ""))
