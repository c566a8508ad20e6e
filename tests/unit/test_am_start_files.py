"""What the AM's container is started with: its job files and the secret in its credentials (no
localizer on the AM's start), the src_dir it serves fetched by the AM itself, and the files left
to YARN only where they must be (a Kerberos cluster's task containers, files too large)."""

import base64
import zlib

from tony_py import appsecret
from tony_py.am.launch import JAR_LINK, JOB_META_FILE, RUNTIME_LINK, JobMeta, job_file_delivery
from tony_py.client.flags import parse_args
from tony_py.client.prepare import SRC_LINK, prepare
from tony_py.client.staging import Resource
from tony_py.client.submission import Submission


class Stager:
    """Records what would be written to the staging dir."""

    home = "hdfs://nn/user/u"
    staging_dir = "hdfs://nn/user/u/.tony/app_1"

    def __init__(self):
        self.written: list[str] = []

    def write_text(self, name, text, mode=0o600, localized=True):
        self.written.append(name)
        return Resource(f"{self.staging_dir}/{name}", len(text), 1) if localized else None

    def upload_private(self, local, name, type_="FILE"):
        self.written.append(name)
        return Resource(f"{self.staging_dir}/{name}", 1, 1)


def staged(kerberos: bool, *flags: str):
    sub = Submission(None, prepare(parse_args(["--executes", "true", "--conf", "tony.worker.instances=2", *flags])))
    sub.app_id, sub.kerberos, sub.stager = "app_1", kerberos, Stager()
    sub._app_classpath = ["$HADOOP_CONF_DIR"]
    resources = {name: Resource(f"hdfs://nn/cache/{name}", 1, 1) for name in (JAR_LINK, RUNTIME_LINK)}
    resources[SRC_LINK] = Resource(f"{Stager.staging_dir}/tony_src_app_1.zip", 300, 1)
    files, src, localized = job_file_delivery(kerberos, False, SRC_LINK, 300, 2)
    meta = JobMeta(app_id="app_1", staging_dir=Stager.staging_dir, user="u", resources={},
                   task_resources=[RUNTIME_LINK, *localized], task_python="python3", src_zip=SRC_LINK,
                   files_from_am=files, src_from_am=src, src_path=resources[SRC_LINK].path if src else None)
    sub._stage_job_files(resources, meta, {})
    return sub, sub._am_request(resources, meta), meta


def test_the_am_localizes_only_cached_files_and_its_job_files_ride_in_its_credentials():
    sub, request, meta = staged(kerberos=False)
    assert sub.stager.written == []  # nothing of this job's own written to HDFS before the submit
    sub._stage_for_reattach({})  # once submitted: what the owner's other processes read
    assert sub.stager.written == ["tony-secret", "tony-final.xml"]
    assert sorted(request["launch"]["resources"]) == [JAR_LINK, RUNTIME_LINK]  # cached: no localizer
    keys = {alias: base64.b64decode(value) for alias, value in request["secret_keys"].items()}
    assert keys.pop(appsecret.CREDENTIALS_ALIAS).decode() == sub.secret
    files = {alias.removeprefix(appsecret.FILE_ALIAS_PREFIX): zlib.decompress(v).decode() for alias, v in keys.items()}
    assert sorted(files) == ["tony-final.xml", JOB_META_FILE, "tony-spec.json"]
    # the AM fetches the src_dir it serves from where the client staged it
    assert meta.src_from_am and '"src_path": "hdfs://nn/user/u/.tony/app_1/tony_src_app_1.zip"' in files[JOB_META_FILE]
    assert "tony.worker.instances" in files["tony-final.xml"]
    # the secret is in no variable of the AM's environment, its launch script being logged
    assert not [v for v in request["launch"]["env"].values() if sub.secret in v]


def test_on_a_kerberos_cluster_tasks_still_localize_the_spec_and_tony_final_xml():
    sub, request, meta = staged(kerberos=True)
    assert sorted(sub.stager.written) == ["tony-final.xml", "tony-spec.json"]
    sub._stage_for_reattach({"tony-final.xml": None, "tony-spec.json": None})
    assert sorted(sub.stager.written) == ["tony-final.xml", "tony-secret", "tony-spec.json"]  # each once
    assert not meta.src_from_am and meta.src_path is None
    assert sorted(request["launch"]["resources"]) == [JAR_LINK, RUNTIME_LINK]  # the AM's copies: credentials
    assert sorted(request["secret_keys"]) == sorted([appsecret.CREDENTIALS_ALIAS] + [
        appsecret.FILE_ALIAS_PREFIX + n for n in ("tony-final.xml", JOB_META_FILE, "tony-spec.json")])


def test_job_files_too_large_for_credentials_are_staged_and_localized(monkeypatch):
    import tony_py.am.launch as launch

    monkeypatch.setattr(launch, "AM_CREDENTIAL_FILES_MAX_BYTES", 10)
    sub, request, _ = staged(kerberos=False)
    assert sorted(sub.stager.written) == ["tony-final.xml", JOB_META_FILE, "tony-spec.json"]
    assert sorted(request["launch"]["resources"]) == sorted([JAR_LINK, RUNTIME_LINK, "tony-final.xml", JOB_META_FILE,
                                                             "tony-spec.json"])
    assert list(request["secret_keys"]) == [appsecret.CREDENTIALS_ALIAS]  # the secret is never staged


def test_the_runtime_zip_is_built_once_per_state_of_its_files(tmp_path, monkeypatch):
    import os
    import tony_py.client.staging as staging

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("x = 1\n")
    monkeypatch.setattr(staging, "package_entries", lambda packages: [("tony_py/a.py", package / "a.py")])
    first = staging.runtime_zip(tmp_path / "fallback.zip")
    built_at = first.stat().st_mtime_ns
    again = staging.runtime_zip(tmp_path / "fallback.zip")
    assert again == first and again.stat().st_mtime_ns == built_at  # reused, not rebuilt
    (package / "a.py").write_text("x = 22\n")  # edited: another zip, with the new content
    changed = staging.runtime_zip(tmp_path / "fallback.zip")
    assert changed != first and b"x = 22" in __import__("zipfile").ZipFile(changed).read("tony_py/a.py")
    for n in range(staging.RUNTIME_CACHE_KEEP + 2):  # only the newest few are kept
        os.utime(package / "a.py", ns=(n, n))
        staging.runtime_zip(tmp_path / "fallback.zip")
    assert len(list(first.parent.glob("tony-runtime-*.zip"))) == staging.RUNTIME_CACHE_KEEP
    assert not list(first.parent.glob(".*tmp")) and not (tmp_path / "fallback.zip").exists()
    (tmp_path / "not-a-dir").write_text("")  # a cache that cannot be written: built beside the submit
    monkeypatch.setattr(staging.paths, "cache_dir", lambda: tmp_path / "not-a-dir")
    assert staging.runtime_zip(tmp_path / "fallback.zip") == tmp_path / "fallback.zip"
    assert (tmp_path / "fallback.zip").stat().st_size > 0


def test_a_job_too_large_for_the_nodes_an_rm_counts_is_asked_again_only_with_two_rms(monkeypatch):
    """A ResourceManager that has just taken over counts only the NodeManagers that registered with
    it again (CI: a GPU job refused 'the largest node has 0' during a fail-over). With two RMs the
    client reads the nodes again before refusing; with one, a job too large is refused at once."""
    import json

    import pytest

    import tony_py.client.submission as submission
    from tony_py.errors import ConfigError

    cpu = {"id": "nm2:1", "labels": [], "capability": {"memory-mb": 12288, "vcores": 8, "yarn.io/gpu": 0}}
    gpu = {"id": "nm1:1", "labels": [], "capability": {"memory-mb": 12288, "vcores": 8, "yarn.io/gpu": 2}}

    class Gateway:
        def __init__(self, ha, views):
            self.views, self.reads, self.ha = views, 0, ha
            self.bridge = type("Bridge", (), {"clusterJson": None})()

        def json(self, what, fn, *args):
            view = self.views[min(self.reads, len(self.views) - 1)]
            self.reads += 1
            return json.loads(json.dumps({"resource_types": ["memory-mb", "vcores", "yarn.io/gpu"], "nodes": view,
                                          "ha": self.ha}))

    slept = []
    monkeypatch.setattr(submission.time, "sleep", slept.append)
    prepared = prepare(parse_args(["--executes", "true", "--conf", "tony.worker.instances=1",
                                   "--conf", "tony.worker.gpus=1"]))
    two_rms = Gateway(True, [[cpu], [cpu], [cpu, gpu]])
    Submission(two_rms, prepared)._check_fits()
    assert two_rms.reads == 3 and len(slept) == 2
    one_rm = Gateway(False, [[cpu], [cpu, gpu]])
    with pytest.raises(ConfigError, match="tony.worker.gpus"):
        Submission(one_rm, prepared)._check_fits()
    assert one_rm.reads == 1
    monkeypatch.setattr(submission, "NODES_REGISTER_WAIT_S", 0.0)  # with two RMs too, it ends
    with pytest.raises(ConfigError, match="tony.worker.gpus"):
        Submission(Gateway(True, [[cpu]]), prepared)._check_fits()
