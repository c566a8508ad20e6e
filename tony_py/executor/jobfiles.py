"""The job's files in a task's working dir: the job (its spec and tony-final.xml) from the AM or
from YARN's localization, and the src_dir unpacked, never through a link."""

from __future__ import annotations

import json
import logging
import os
import stat
import zipfile
from pathlib import Path

from tony_py.config.spec import FINAL_CONF_FILE, SPEC_FILE
from tony_py.executor.channel import AmChannel
from tony_py.executor.settings import Settings

log = logging.getLogger("tony.executor")


def load_job(channel: AmChannel, cwd: Path, task: str) -> dict:
    """The job, as {"spec": JobSpec dict, "final_conf": tony-final.xml's text or None}: from the
    AM, or from the files YARN localized on a Kerberos cluster (tony_py/am/launch.py)."""
    spec_file = cwd / SPEC_FILE
    if spec_file.exists():
        return {"spec": json.loads(spec_file.read_text()), "final_conf": None}
    return channel.job(task)


def fetch_job_files(channel: AmChannel, settings: Settings, final_conf: str | None, cwd: Path) -> None:
    """What the AM serves instead of YARN localizing it: tony-final.xml (TonY's tasks find it in
    their working dir) and the zipped src_dir, unless YARN localized them (a Kerberos cluster,
    a src_dir too large for the AM). Never written through a link."""
    conf = cwd / FINAL_CONF_FILE
    if final_conf is not None and not conf.is_symlink() and not conf.exists():
        conf.write_text(final_conf)
    src = cwd / settings.src_zip if settings.src_zip else None
    if src is not None and not src.exists() and not src.is_symlink():
        partial = cwd / f".{settings.src_zip}.part"
        size = channel.download_src(settings.task, partial)
        partial.rename(src)
        log.info("fetched src_dir from the AM (%d bytes)", size)


class UnpackError(Exception):
    """The src_dir archive would write where it must not; the task cannot start."""


def unpack_src(zip_name: str | None, cwd: Path) -> None:
    """Unzip the job's src_dir into the container's working dir, once.

    The working dir holds the links YARN made to localized resources (venv, tony_runtime,
    the NodeManager's shared cache behind them): nothing is ever written through a link, so a
    src_dir entry named like one cannot change what later jobs get from that cache. Links in
    the archive are not recreated, and modes lose group/other write and set-id bits."""
    if not zip_name or (cwd / ".tony_src_unpacked").exists():
        return
    with zipfile.ZipFile(cwd / zip_name) as zf:
        for info in zf.infolist():
            mode = (info.external_attr >> 16) & 0o177777
            if stat.S_ISLNK(mode):
                log.warning("src_dir: skipped the symbolic link %s", info.filename)
                continue
            if _src_target(info.filename, cwd) is None:
                continue  # names the working dir itself ('./')
            target = Path(zf.extract(info, cwd))
            if not info.is_dir() and mode & 0o777:
                os.chmod(target, mode & 0o755)
    (cwd / ".tony_src_unpacked").touch()


def _src_target(name: str, cwd: Path) -> Path | None:
    """Where zipfile will write the entry `name` (None: cwd itself), refused unless it is
    inside cwd with no link on the way. Checked as zipfile writes it, not as it is named:
    zipfile drops a leading '/', '.' and '..' parts, so '/venv/x' and '../venv/x' land in
    'venv/x'; such names are refused outright."""
    parts = name.split("/")
    if name.startswith("/") or ".." in parts:
        raise UnpackError(f"src_dir holds {name!r}: an absolute name or a '..' in it is not allowed; "
                          "rename that entry of src_dir")
    parts = [p for p in parts if p not in ("", ".")]
    if not parts:
        return None
    for depth in range(1, len(parts) + 1):
        if cwd.joinpath(*parts[:depth]).is_symlink():
            raise UnpackError(f"src_dir holds {name}, which would write into the localized resource "
                              f"{parts[0]!r}; rename that entry of src_dir")
    target = cwd.joinpath(*parts)
    if os.path.commonpath([os.path.realpath(cwd), os.path.realpath(target)]) != os.path.realpath(cwd):
        raise UnpackError(f"src_dir holds {name!r}, which would write outside the working dir")
    return target
