"""Container entrypoint: render the shared conf templates for one daemon and exec it.

Usage: entrypoint.py namenode|datanode|resourcemanager|nodemanager
Environment: NM_INDEX and NM_GPUS (nodemanager), CLIENT_CONF_DIR (resourcemanager: where to
write the client configuration for the host). Ports are the fixed ones of docker-compose.yml.
"""

import os
import shutil
import string
import subprocess
import sys
from pathlib import Path

TEMPLATES = Path("/opt/hadoop/templates")
CONF = Path("/opt/hadoop/conf")
DATA = Path("/data")
MAIN = {
    "namenode": "org.apache.hadoop.hdfs.server.namenode.NameNode",
    "datanode": "org.apache.hadoop.hdfs.server.datanode.DataNode",
    "resourcemanager": "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager",
    "nodemanager": "org.apache.hadoop.yarn.server.nodemanager.NodeManager",
}
OPENS = [f"--add-opens=java.base/{p}=ALL-UNNAMED" for p in (
    "java.io", "java.lang", "java.lang.reflect", "java.math", "java.net", "java.text", "java.util",
    "java.util.concurrent", "java.util.zip", "sun.security.util", "sun.security.x509")]

nm_index = int(os.environ.get("NM_INDEX", "1"))
VALUES = {
    "host": "127.0.0.1", "user": "root", "data_dir": str(DATA), "conf_dir": str(CONF),
    "lib_dir": "/opt/hadoop/lib", "nm_memory_mb": 12288, "nm_vcores": 16,
    "nn_rpc_port": 9000, "nn_http_port": 9870, "dn_data_port": 9866, "dn_http_port": 9864, "dn_ipc_port": 9867,
    "rm_port": 8032, "rm_scheduler_port": 8030, "rm_tracker_port": 8031, "rm_admin_port": 8033, "rm_web_port": 8088,
    "nm_index": nm_index, "nm_gpus": os.environ.get("NM_GPUS", "0"),
    "nm_port": 8041 + 100 * nm_index, "nm_localizer_port": 8040 + 100 * nm_index,
    "nm_web_port": 8042 + 100 * nm_index, "nm_collector_port": 8048 + 100 * nm_index,
    "nodemanager_properties": "",
}


def render(target: Path, nodemanager: bool) -> None:
    target.mkdir(parents=True, exist_ok=True)
    values = dict(VALUES)
    if nodemanager:
        values["nodemanager_properties"] = string.Template((TEMPLATES / "nodemanager.xml").read_text()).substitute(values)
    for name in ("core-site.xml", "hdfs-site.xml", "yarn-site.xml", "capacity-scheduler.xml"):
        (target / name).write_text(string.Template((TEMPLATES / name).read_text()).substitute(values))
    shutil.copy(TEMPLATES / "log4j.properties", target / "log4j.properties")


def main() -> None:
    daemon = sys.argv[1]
    render(CONF, nodemanager=daemon == "nodemanager")
    if daemon == "resourcemanager" and os.environ.get("CLIENT_CONF_DIR"):
        render(Path(os.environ["CLIENT_CONF_DIR"]), nodemanager=False)
    java = [shutil.which("java"), "-Xmx384m", "-XX:+UseSerialGC", "-XX:+IgnoreUnrecognizedVMOptions", *OPENS,
            "-cp", f"{CONF}:/opt/hadoop/lib/*"]
    if daemon == "namenode" and not (DATA / "namenode" / "current").exists():
        subprocess.run([*java, MAIN[daemon], "-format", "-force", "-nonInteractive"], check=True)
    os.execv(java[0], [*java, MAIN[daemon]])


if __name__ == "__main__":
    main()
