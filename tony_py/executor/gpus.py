"""The devices YARN's GPU plugin assigned to this container, from its NodeManager.

Only a NodeManager with the LinuxContainerExecutor assigns devices; its REST API lists them
(`/ws/v1/node/resources/yarn.io%2Fgpu`: `assignedGpuDevices`, each with the container id, the
nvidia-smi index and the minor number). Elsewhere the list is empty and the AM's choice
(tony_py/am/core/gpus.py) stands.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

# urllib.request and the XML reader are imported where used: only GPU tasks ask the
# NodeManager, and nvidia-smi is looked up after the user process started (~6 ms off every
# executor's start, which a node pays once per container).

log = logging.getLogger("tony.executor")

DISCOVERY_KEY = "yarn.nodemanager.resource-plugins.gpu.path-to-discovery-executables"
# Where YARN's GPU plugin looks when the key is unset (GpuDiscoverer's default directories)
DEFAULT_DIRS = ("/usr/bin", "/bin", "/usr/local/nvidia/bin")


def nodemanager_assignment(nm_host: str | None, nm_http_port: str | None, container_id: str | None,
                           timeout: float = 2.0) -> list[str] | None:
    """Device indices YARN's GPU plugin assigned to this container, or None where the
    NodeManager assigns none (no LinuxContainerExecutor), cannot be asked, or does not know it."""
    if not (nm_host and nm_http_port and container_id):
        return None
    import urllib.error
    import urllib.request

    url = f"http://{nm_host}:{nm_http_port}/ws/v1/node/resources/yarn.io%2Fgpu"
    try:
        request = urllib.request.Request(url, headers={"Accept": "application/json"})
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            info = json.loads(resp.read(1 << 20))
    except urllib.error.HTTPError as exc:
        if exc.code == 404:  # no GPU plugin on this NodeManager (it only counts GPUs): nothing to ask
            return None
        log.warning("could not ask the NodeManager which GPUs it assigned (%s: HTTP %s); using the AM's choice",
                    url, exc.code)
        return None
    except (OSError, ValueError) as exc:
        # e.g. a NodeManager web UI behind SPNEGO or HTTPS only: the AM's choice stands, which
        # under the LinuxContainerExecutor may name a device the container's cgroup blocks
        log.warning("could not ask the NodeManager which GPUs it assigned (%s: %s); using the AM's choice",
                    url, exc)
        return None
    return assigned_to(info, container_id)


def assigned_to(info: dict, container_id: str) -> list[str] | None:
    """From the NodeManager's NMGpuResourceInfo JSON: this container's device indices."""
    devices = info.get("assignedGpuDevices") if isinstance(info, dict) else None
    if not isinstance(devices, list):
        return None
    mine = sorted(int(d["index"]) for d in devices
                  if isinstance(d, dict) and d.get("containerId") == container_id and isinstance(d.get("index"), int))
    return [str(i) for i in mine] or None


def find_nvidia_smi(env: dict[str, str]) -> str | None:
    """The nvidia-smi this node's YARN GPU plugin uses (the key in $HADOOP_CONF_DIR/yarn-site.xml,
    a file or a directory holding it), else the one on PATH, else one in YARN's default places.
    Containers get a bare PATH from the NodeManager, so an admin's non-standard location is
    only known through YARN's own setting."""
    from tony_py.config.xmlconf import read_xml
    from tony_py.errors import UsageError

    conf_dir = env.get("HADOOP_CONF_DIR")
    if conf_dir:
        try:
            configured = read_xml(Path(conf_dir) / "yarn-site.xml").get(DISCOVERY_KEY, "").strip()
        except UsageError:  # unreadable or malformed: YARN's setting is unknown here
            configured = ""
        if configured:
            candidate = Path(configured) / "nvidia-smi" if os.path.isdir(configured) else Path(configured)
            if os.access(candidate, os.X_OK) and candidate.is_file():
                return str(candidate)
    return shutil.which("nvidia-smi", path=env.get("PATH")) or shutil.which("nvidia-smi", path=os.pathsep.join(DEFAULT_DIRS))
