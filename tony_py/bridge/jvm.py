"""Where the JVM is and how every TonY-py JVM is started.

One place for the JDK 17 module flags so the cluster daemons, the client's gateway JVM and
the ApplicationMaster's JVM cannot drift apart.
"""

from __future__ import annotations

import os
import shutil
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
        raise SetupError("no Java found: install a JDK (11 or 17) or set JAVA_HOME")
    return Path(java).resolve().parent.parent


def java_executable() -> str:
    return str(java_home() / "bin" / "java")
