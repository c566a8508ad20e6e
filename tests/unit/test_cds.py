"""Class-data sharing for the client and AM JVMs (tony_py/bridge/cds.py, tony_py/am/start_jvm.sh):
the archive's life, with a stand-in `java` that records how it was started (no JVM here: the
integration tests start real ones with these options)."""

import os
import subprocess
import time
from pathlib import Path

import pytest

from tony_py import paths
from tony_py.bridge import cds

pytestmark = pytest.mark.unit
START_JVM = paths.PACKAGE_DIR / "am" / "start_jvm.sh"

FAKE_JAVA = """#!/bin/bash
echo "$@" >> "$CALLS"
echo "$CLASSPATH" >> "$CALLS.classpath"
if [ -n "${RAN:-}" ]; then echo "[tony-am-jvm] gateway on 127.0.0.1:1"; fi
for a in "$@"; do
  case "$a" in
    -XX:ArchiveClassesAtExit=*)
      if [ -n "${REFUSE_DUMP:-}" ]; then echo "Error occurred during initialization of VM"; exit 1; fi
      echo archived > "${a#*=}";;
  esac
done
exit ${EXIT:-0}
"""


def test_directories_go_after_every_jar_in_their_own_order():
    entries = ["/conf", "/a.jar", "/lib/*", "/etc/hadoop", "/b.jar"]
    assert cds.classpath_order(entries) == ["/a.jar", "/lib/*", "/b.jar", "/conf", "/etc/hadoop"]


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "cache_dir", lambda: tmp_path / "cache")
    return tmp_path / "cache"


def test_the_first_client_jvm_writes_the_archive_and_the_next_maps_it(cache, tmp_path):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"x")
    first = cds.Archive("java", [str(jar)], [], env={})
    [opt] = first.options()
    assert opt.startswith("-XX:ArchiveClassesAtExit=")
    assert cds.Archive("java", [str(jar)], [], env={}).options() == []  # one writer at a time
    Path(opt.split("=", 1)[1]).write_bytes(b"archive")
    proc = subprocess.Popen(["true"])
    proc.wait()
    first.finish(proc, exited_cleanly=True)
    assert cds.Archive("java", [str(jar)], [], env={}).options() == [f"-XX:SharedArchiveFile={first.path}"]
    assert not list(first.path.parent.glob("*.lock")) and not list(first.path.parent.glob("*.tmp"))


def test_every_conf_dir_shares_the_archive_of_its_jars(cache, tmp_path):
    """The JDK lets directories after the last jar differ: one archive for every cluster's conf."""
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"x")
    (tmp_path / "conf1").mkdir()
    (tmp_path / "conf2").mkdir()
    one = cds.Archive("java", [str(jar), str(tmp_path / "conf1")], [], env={}).path
    assert cds.Archive("java", [str(jar), str(tmp_path / "conf2")], [], env={}).path == one
    (tmp_path / "conf1" / "yarn-site.xml").write_text("<configuration/>")  # a directory's mtime moves
    assert cds.Archive("java", [str(jar), str(tmp_path / "conf1")], [], env={}).path == one


def test_a_jvm_killed_while_writing_leaves_no_archive_and_no_lock(cache, tmp_path):
    archive = cds.Archive("java", [str(tmp_path)], [], env={})
    [opt] = archive.options()
    Path(opt.split("=", 1)[1]).write_bytes(b"half")
    archive.finish(None, exited_cleanly=False)
    assert not archive.path.exists() and list(archive.path.parent.iterdir()) == []


def test_a_changed_jar_gets_a_new_archive_and_the_users_own_sharing_option_wins(cache, tmp_path):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"x")
    before = cds.Archive("java", [str(jar)], [], env={}).path
    jar.write_bytes(b"xy")
    assert cds.Archive("java", [str(jar)], [], env={}).path != before
    assert cds.Archive("java", [str(jar)], ["-Xshare:off"], env={}).options() == []
    assert cds.Archive("java", [str(jar)], [], env={cds.ENV: "off"}).options() == []


def run_start_jvm(tmp_path, *, archive="am-x.jsa", exit_code=0, refuse_dump=False, container="c1", ran=False):
    """start_jvm.sh in a container of its own whose classpath links the localized jar."""
    # written once: the archive's name hashes java's and the jar's mtimes (a second run that
    # rewrote them a second later would rightly get another archive)
    java = tmp_path / "java"
    if not java.exists():
        java.write_text(FAKE_JAVA)
        java.chmod(0o755)
    jar = tmp_path / "usercache" / "u" / "filecache" / "10" / "tony-py-abc.jar"
    jar.parent.mkdir(parents=True, exist_ok=True)
    if not jar.exists():
        jar.write_bytes(b"jar")
    appdir = tmp_path / "usercache" / "u" / "appcache" / "app_1"
    workdir = appdir / container
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "tony-py.jar").unlink(missing_ok=True)
    (workdir / "tony-py.jar").symlink_to(jar)
    calls = tmp_path / "calls"
    env = {"PATH": os.environ["PATH"], "LOCAL_DIRS": f"{appdir},/elsewhere", "TONY_AM_CDS": archive,
           "CLASSPATH": f"{workdir}/tony-py.jar:/lib/*:{workdir}",
           "CALLS": str(calls), "EXIT": str(exit_code), **({"REFUSE_DUMP": "1"} if refuse_dump else {}),
           **({"RAN": "1"} if ran else {})}
    with open(tmp_path / "am.log", "w") as log:
        rc = subprocess.run(["bash", str(START_JVM), str(java), "-Xmx256m", "Main"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, cwd=workdir).returncode
    return rc, calls.read_text().splitlines(), tmp_path / "usercache" / "u" / "tony-py-cds"


def test_the_first_am_on_a_node_writes_the_archive_and_the_next_maps_it(tmp_path):
    rc, [call], store = run_start_jvm(tmp_path, exit_code=3)
    assert rc == 3  # the JVM's status is the container's
    assert "-XX:ArchiveClassesAtExit=" in call and call.endswith("-Xmx256m Main")
    [written] = list(store.iterdir())
    assert written.name.startswith("am-x-") and written.suffix == ".jsa"
    # the JVM was given the localized jar itself: the container's link dies with the container
    jar = tmp_path / "usercache" / "u" / "filecache" / "10" / "tony-py-abc.jar"
    assert (tmp_path / "calls.classpath").read_text().splitlines()[0].startswith(f"{jar}:/lib/*:")
    (tmp_path / "calls").unlink()
    rc, [call], _ = run_start_jvm(tmp_path, container="c2")  # the next AM, in another container
    option, rest = call.split(" ", 1)
    assert rc == 0 and rest == "-Xmx256m Main"
    assert option.startswith("-XX:SharedArchiveFile=") and Path(option.split("=", 1)[1]).resolve() == written


def test_an_am_whose_jvm_will_not_write_the_archive_starts_without_one(tmp_path):
    rc, calls, store = run_start_jvm(tmp_path, refuse_dump=True)
    assert rc == 0
    assert "-XX:ArchiveClassesAtExit=" in calls[0] and calls[1] == "-Xmx256m Main"
    assert list(store.iterdir()) == []  # no archive, no lock: the next AM tries again


def test_a_jar_changed_in_place_gets_a_new_am_archive(tmp_path):
    run_start_jvm(tmp_path)
    jar = tmp_path / "usercache" / "u" / "filecache" / "10" / "tony-py-abc.jar"
    os.utime(jar, (jar.stat().st_atime, jar.stat().st_mtime + 10))  # an in-place upgrade
    (tmp_path / "calls").unlink()
    rc, [call], store = run_start_jvm(tmp_path, container="c2")
    assert "-XX:ArchiveClassesAtExit=" in call and len(list(store.iterdir())) == 2


def test_an_am_that_ran_is_never_started_again_whatever_its_jvm_said_at_exit(tmp_path):
    """A JVM that refuses to write its archive as it exits has done its work: the AM must not
    run twice in one attempt."""
    rc, calls, store = run_start_jvm(tmp_path, refuse_dump=True, ran=True)
    assert rc == 1 and len(calls) == 1
    assert list(store.iterdir()) == []  # its lock went with it


def test_a_lock_whose_writer_died_goes_with_its_half_written_file(tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    rc, [call], store = run_start_jvm(tmp_path)  # writes am-x-<key>.jsa
    [written] = list(store.iterdir())
    written.unlink()
    (store / (written.name + ".lock")).write_text(f"{dead.pid}\n")
    (store / f"{written.name}.{dead.pid}.tmp").write_bytes(b"half")
    (tmp_path / "calls").unlink()
    rc, [call], _ = run_start_jvm(tmp_path)
    assert "-XX:ArchiveClassesAtExit=" in call  # the dead writer's lock did not stop this one
    assert sorted(p.name for p in store.iterdir()) == [written.name]


def test_no_archive_named_no_sharing(tmp_path):
    rc, [call], _ = run_start_jvm(tmp_path, archive="")
    assert rc == 0 and call == "-Xmx256m Main"


def test_a_client_lock_whose_writer_is_gone_is_cleared_with_its_half_written_file(cache, tmp_path):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"x")
    archive = cds.Archive("java", [str(jar)], [], env={})
    dead = subprocess.Popen(["true"])
    dead.wait()
    archive.path.parent.mkdir(parents=True)
    archive.path.with_suffix(".lock").write_text(str(dead.pid))
    half = archive.path.with_name(f"{archive.path.stem}.{dead.pid}.tmp")
    half.write_bytes(b"half")
    assert archive.options()[0].startswith("-XX:ArchiveClassesAtExit=")
    assert not half.exists() and archive.path.with_suffix(".lock").read_text() == str(os.getpid())


def test_a_lock_whose_writer_died_long_ago_is_cleared_with_its_half_written_file(cache, tmp_path):
    jar = tmp_path / "a.jar"
    jar.write_bytes(b"x")
    dead = cds.Archive("java", [str(jar)], [], env={})
    [opt] = dead.options()
    half = Path(opt.split("=", 1)[1])
    half.write_bytes(b"half")
    old = time.time() - cds.LOCK_STALE_S - 1
    os.utime(dead.path.with_suffix(".lock"), (old, old))
    # a day-old lock: its pid (ours, here) may be another process's by now
    assert cds.Archive("java", [str(jar)], [], env={}).options()[0].startswith("-XX:ArchiveClassesAtExit=")
    assert not half.exists() and time.time() - dead.path.with_suffix(".lock").stat().st_mtime < 60


def am_request(*flags):
    """The AM's launch request a submit would send, without a cluster (pure assembly)."""
    from types import SimpleNamespace

    from tony_py.am.launch import JAR_LINK, RUNTIME_LINK, JobMeta
    from tony_py.client.flags import parse_args
    from tony_py.client.prepare import prepare
    from tony_py.client.staging import Resource
    from tony_py.client.submission import Submission

    sub = Submission(None, prepare(parse_args(["--executes", "true", *flags])))
    sub._app_classpath = ["$HADOOP_CONF_DIR", "$HADOOP_COMMON_HOME/share/hadoop/common/*"]
    sub.stager = SimpleNamespace(staging_dir="hdfs://nn/user/u/.tony/app_1")
    resources = {name: Resource(f"hdfs://nn/{name}", 1, 1) for name in
                 (JAR_LINK, RUNTIME_LINK, "tony-final.xml", "tony-spec.json", "tony-job.json", "tony-secret")}
    meta = JobMeta(app_id="app_1", staging_dir="s", user="u", resources={}, task_resources=[], task_python="python3")
    return sub._am_request(resources, meta)["launch"]


def test_the_am_starts_through_start_jvm_with_its_directories_after_its_jars():
    launch = am_request()
    [command] = launch["commands"]
    assert command.startswith("bash {{PWD}}/tony_runtime/tony_py/am/start_jvm.sh {{JAVA_HOME}}/bin/java ")
    assert launch["env"]["CLASSPATH"].split("<CPS>") == [
        "{{PWD}}/tony-py.jar", "$HADOOP_COMMON_HOME/share/hadoop/common/*", "{{PWD}}", "$HADOOP_CONF_DIR"]
    assert launch["env"]["TONY_AM_CDS"].startswith("am-") and launch["env"]["TONY_AM_CDS"].endswith(".jsa")


def test_no_am_archive_when_turned_off_or_in_a_docker_image():
    assert am_request("--conf", "tony.am.class-data-sharing=false")["env"]["TONY_AM_CDS"] == ""
    docker = am_request("--conf", "tony.docker.enabled=true", "--conf", "tony.docker.containers.image=img:1")
    assert docker["env"]["TONY_AM_CDS"] == ""
    assert docker["commands"][0].startswith("{{JAVA_HOME}}/bin/java ")  # the image need not have bash
