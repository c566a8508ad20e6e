"""The notebook task of `tony notebook` (TonY's NotebookSubmitter): `python -m tony_py.jupyter`.

Runs JupyterLab from the job's own Python environment on this node's address (not a wildcard
address) and $NOTEBOOK_PORT, the port the executor reserved for the task. Jupyter reads its token
from $JUPYTER_TOKEN, which the executor derives from the application's secret; Jupyter prints a
token it did not generate masked, so the container's logs never hold it. The client relays a
local port to this address (tony_py/client/notebook.py).
"""

from __future__ import annotations

import os
import socket
import sys


def server_args(host: str, port: str, root_dir: str, as_root: bool) -> list[str]:
    """JupyterLab's command line: no browser, this address and port only (no retrying on another
    port: the client relays to this one), the task's working dir (where src_dir is unpacked)."""
    args = ["-m", "jupyterlab", "--no-browser", f"--ServerApp.ip={host}", f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0", f"--ServerApp.root_dir={root_dir}",
            # reached through the client's relay, so the Host header is the user's, not this node's
            "--ServerApp.allow_remote_access=True"]
    if as_root:  # NodeManagers without the LinuxContainerExecutor run containers as their own user
        args.append("--ServerApp.allow_root=True")
    return args


# Jupyter's highest-priority config file (server_env): the token comes from the environment, so a
# `c.IdentityProvider.token = ''` in the user's ~/.jupyter or the venv's etc/jupyter cannot turn it off.
TOKEN_CONFIG = ("# written by TonY-py (tony_py/jupyter.py): the notebook never runs without its token\n"
                "import os\n"
                "c.IdentityProvider.token = os.environ['JUPYTER_TOKEN']\n")


def server_env(env: dict[str, str], workdir: str) -> dict[str, str]:
    """Jupyter's runtime files (the cookie secret, kernels' connection files, which hold their
    keys) in the container's private working dir, not a HOME that other jobs may share; and
    TonY-py's config dir first on JUPYTER_CONFIG_PATH, which Jupyter searches before the user's
    and the venv's own (those still apply, under it)."""
    ours = os.path.join(workdir, ".jupyter-config")
    os.makedirs(ours, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(ours, "jupyter_server_config.py"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(TOKEN_CONFIG)
    search = [ours, *[p for p in env.get("JUPYTER_CONFIG_PATH", "").split(os.pathsep) if p]]
    return {**env, "JUPYTER_RUNTIME_DIR": os.path.join(workdir, ".jupyter-runtime"),
            "IPYTHONDIR": env.get("IPYTHONDIR") or os.path.join(workdir, ".ipython"),
            "JUPYTER_CONFIG_PATH": os.pathsep.join(search)}


def main() -> int:
    port, token = os.environ.get("NOTEBOOK_PORT"), os.environ.get("JUPYTER_TOKEN")
    if not port or not token:
        raise SystemExit("the notebook task needs NOTEBOOK_PORT and JUPYTER_TOKEN (set by TonY-py for the "
                         "job type 'notebook')")
    try:
        import jupyterlab  # noqa: F401 - only whether it is there
    except ImportError:
        raise SystemExit(f"JupyterLab is not installed in the job's Python environment ({sys.executable}): "
                         "add the jupyterlab package to the venv, or give your own server with --executes") from None
    host = socket.gethostbyname(os.environ.get("NM_HOST") or socket.getfqdn())
    print(f"JupyterLab on http://{host}:{port} (the client relays to it)", flush=True)
    # exec: the executor's signals and exit code are the server's own
    cwd = os.getcwd()
    os.execve(sys.executable, [sys.executable, *server_args(host, port, cwd, os.geteuid() == 0)],
              server_env(dict(os.environ), cwd))
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
