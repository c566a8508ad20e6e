"""The client's cache (~/.cache/tony-py or TONY_PY_CACHE) holds jars, a runtime the jar driver
runs, and copies of job history with tony-final.xml: only its user may use it."""

import os
import stat

import pytest

from tony_py import paths
from tony_py.errors import SetupError


@pytest.fixture
def cache(tmp_path, monkeypatch):
    path = tmp_path / "shared" / "tony-py"
    monkeypatch.setenv("TONY_PY_CACHE", str(path))
    return path


def mode(path):
    return stat.S_IMODE(path.stat().st_mode)


def test_the_cache_is_created_private_whatever_the_umask(cache):
    old = os.umask(0o022)
    try:
        assert paths.cache_dir() == cache
    finally:
        os.umask(old)
    assert mode(cache) == 0o700


def test_an_existing_cache_readable_by_everyone_is_made_private(cache):
    cache.mkdir(parents=True, mode=0o755)
    cache.chmod(0o755)
    paths.cache_dir()
    assert mode(cache) == 0o700


@pytest.mark.parametrize("bits", [0o777, 0o775, 0o757])
def test_a_cache_others_may_write_is_refused(cache, bits):
    cache.mkdir(parents=True)
    cache.chmod(bits)
    with pytest.raises(SetupError, match=f"is writable by other users \\(mode 0{bits:o}\\)"):
        paths.cache_dir()
    assert mode(cache) == bits  # left as it was: what is in it may not be ours


def test_a_cache_another_user_owns_is_refused(cache, monkeypatch):
    cache.mkdir(parents=True, mode=0o700)
    owner = cache.stat().st_uid
    monkeypatch.setattr(os, "geteuid", lambda: owner + 1)  # as seen by another user
    with pytest.raises(SetupError, match=f"belongs to another user \\(uid {owner}\\)"):
        paths.cache_dir()
