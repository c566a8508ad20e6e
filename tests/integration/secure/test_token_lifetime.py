"""Jobs longer than their delegation tokens, on the secure local cluster, whose tokens are
renewable for TOKEN_RENEW_S and dead TOKEN_MAX_S after their issue (secure/conftest.py).

Every moment compared here is a daemon's (secure/token_files.py): a token's issue and max dates
as the NameNode put them into it, its renewal interval as the NameNode answers a renewal, a
file's modification time (the NameNode's, as the file closed), an AM attempt's end as the RM
reports it. The test's clock only says when to look again. hdfs_io.py starts a task's next
write once its last one returned, so a write reached HDFS after the file before it was closed;
and it keeps a copy of the token file as each write starts (the write uses that set or a later one).
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import time
from pathlib import Path

from secure import token_files
from secure.conftest import ALICE, TOKEN_MAX_S, TOKEN_RENEW_S, hdfs_io_args
from support import Background, am_processes, wait_for

TASKS = ("worker-0", "worker-1")
# The executors' lease, longer than the next AM attempt's start on 2 loaded cores, so that it
# adopts them and does not find them fenced: from the kill to the executors' "the AM moved", 20 s
# measured at a load average of 19 (10 s, the default, is not always enough; nothing here waits on it).
LEASE_S = 120
WAIT_S = 300  # for each event of a job on 2 loaded cores (an AM attempt, a round of writes)


def outputs(gw, base: str) -> dict[str, int]:
    """{file name: modification time (ms, the NameNode's)} of the job's outputs: `hdfs dfs -put`
    writes X._COPYING_ and renames it X once closed, which keeps the time of the close."""
    names = [n for n in gw.call("list outputs", gw.fs.listFiles, f"{base}/out") if n.endswith(".txt")]
    return {n.rsplit("/", 1)[-1]: int(json.loads(gw.call("stat", gw.fs.describe, n))["mtime"]) for n in names}


def rounds(written: dict[str, int], task: str, attempt: int) -> list[str]:
    """A task's outputs of one gang attempt, in round order."""
    names = [n for n in written if n.startswith(f"{task}-a{attempt}-r")]
    return sorted(names, key=lambda n: int(n[:-len(".txt")].rsplit("r", 1)[1]))


def reached_hdfs_after(written: dict[str, int], task: str, attempt: int, moment_ms: int) -> list[str]:
    """The task's writes that reached HDFS after `moment_ms`: those whose round before was closed after it."""
    done = rounds(written, task, attempt)
    return [later for earlier, later in zip(done, done[1:]) if written[earlier] > moment_ms]


class TokensHeld:
    """The HDFS token a task's token file held as a write started (hdfs_io.py's copy)."""

    def __init__(self, gw, where: Path):
        self.gw, self.where, self.known = gw, where, {}

    def __call__(self, name: str) -> token_files.Token:
        if name not in self.known:
            path = self.where / (name[:-len(".txt")] + ".tokens")
            self.known[name] = token_files.hdfs_token(token_files.read(self.gw, path))
        return self.known[name]


def am_launch_tokens(cluster, gw, app_id: str, attempt: int) -> tuple[Path, list[token_files.Token]]:
    """The tokens the RM launched an AM attempt with: its container's token file, in the
    NodeManager's local dir (read whole: the NodeManager writes it as it launches)."""
    pattern = f"data/nm*/local/usercache/*/appcache/{app_id}/container_*_{attempt:02d}_000001/container_tokens"

    def found():
        for path in cluster.workdir.glob(pattern):
            tokens = token_files.read_whole(gw, path)
            if tokens is not None:
                return path, tokens
        return None

    return wait_for(found, WAIT_S, f"the token file of {app_id}'s AM attempt {attempt}")


def namenode_past(gw, clock: str, moment_ms: int, what: str) -> int:
    """Wait until the NameNode's clock is past `moment_ms`; returns its time then."""
    def past():
        now = token_files.namenode_now_ms(gw, clock)
        if now > moment_ms:
            return now
        time.sleep(min((moment_ms - now) / 1000, 5))  # sooner would only ask again
        return None

    return wait_for(past, TOKEN_MAX_S + WAIT_S, what)


def still_running(job: Background, what: str) -> None:
    if job.proc.poll() is not None:
        raise AssertionError(f"the job ended before {what}:\n" + ("".join(job.out) + job.err)[-3000:])


def second_am_log(cluster, app_id: str) -> str:
    """What the second AM attempt said, for a wait on it that timed out."""
    text = "".join(p.read_text(errors="replace") for d in cluster.container_dirs(app_id)
                   if d.name.endswith("_02_000001") for p in d.glob("am.log"))
    return "the second AM attempt's log:\n" + text[-3000:]


def attempts(cluster, app_id: str) -> list[dict]:
    """The app's AM attempts as the RM reports them (its REST API wants SPNEGO: cluster.http)."""
    reply = cluster.http.get(f"{cluster.rm_web}/ws/v1/cluster/apps/{app_id}/appattempts", timeout=10).json()
    return sorted(reply["appAttempts"]["appAttempt"], key=lambda a: a["id"])


def test_tokens_end_with_a_keytab_the_job_goes_on_without_one_a_late_restart_says_why(cluster, hdfs_dir, tmp_path):
    """Two jobs side by side:

    - with the keytab. Its submitted HDFS token (read from its first AM's token file) still
      writes after its first renew-expiry (its issue date plus the NameNode's renewal interval):
      the RM renewed it; and no more after its max date. Every task writes after that max date:
      with a set the AM fetched. Then the tasks hold their writes and the AM is killed; its second
      attempt is launched with tokens all past their max date (its container's token file). Once
      the token files of the tasks it adopted hold a token issued after the first attempt ended
      as the RM reports it (the second attempt's own set: the first was dead), they write again.
      The RM keeps no registration time (an attempt has a start and an end only), so "a new set
      before it registers" is shown by what that order protects: an attempt that touched HDFS
      with the tokens it was launched with could not read its predecessor's task table there, and
      would start the job over instead of adopting its tasks. Then the tasks die, that attempt
      restarts them with its sets, and the job succeeds;
    - without one (alice's ticket), the client says when the tokens end; the task dies (SIGKILL:
      restartable) a max lifetime after its first write, so after they are dead; its
      replacement's first HDFS read fails, and the failure says why and what to do."""
    base, gw = hdfs_dir
    plain = base + "-no-keytab"
    gw.call("mkdir", gw.fs.mkdirs, f"{plain}/out", 0o700)
    gw.call("write input", gw.fs.writeText, f"{plain}/input.txt", "forty-two\n", 0o600)
    copies, die, hold, clock = tmp_path / "tokens", tmp_path / "die", tmp_path / "hold", f"{base}/clock"
    copies.mkdir(mode=0o700)
    without = Background(cluster, ["--conf", "tony.am.retry-count=1", *hdfs_io_args(
        cluster, plain, workers=1, params=f"--rounds 2 --every {TOKEN_MAX_S + 5} --die-in-round 1")])
    params = (f"--rounds 1000 --every 6 --die-when {die} --hold-while {hold} --rounds-after-restart 2 "
              f"--token-copies {copies}")
    job = Background(cluster, ["--principal", ALICE, "--keytab", cluster.keytab("alice"),
                               "--conf", "tony.am.retry-count=1", "--conf", f"tony.task.executor.lease-sec={LEASE_S}",
                               *hdfs_io_args(cluster, base, params=params)],
                     env={"KRB5CCNAME": "FILE:/nonexistent/no-ticket"})
    held, submitted_only = TokensHeld(gw, copies), None
    try:
        wait_for(lambda: still_running(job, "it was submitted") or job.app_id, WAIT_S, "the job's application id")
        launched, tokens = am_launch_tokens(cluster, gw, job.app_id, 1)
        submitted = token_files.hdfs_token(tokens)
        assert submitted.max_ms - submitted.issued_ms == TOKEN_MAX_S * 1000, submitted
        interval = token_files.renew_interval_ms(gw)
        assert TOKEN_RENEW_S * 1000 <= interval < TOKEN_MAX_S * 1000, interval
        submitted_only = token_files.TokensOnlyClient(cluster, token_files.write_hdfs_tokens_only(
            gw, launched, tmp_path / "submitted.tokens"))

        namenode_past(gw, clock, submitted.issued_ms + interval, "the submitted token's first renew-expiry")
        refused = submitted_only.create(f"{base}/renewed")
        assert refused is None, f"the submitted token was not renewed past its first expiry: {refused}"
        namenode_past(gw, clock, submitted.max_ms, "the submitted token's max date")
        refused = submitted_only.create(f"{base}/dead")
        assert refused and "InvalidToken" in refused, f"the submitted token still writes after its max date: {refused}"

        def every_task(writes_of, what):
            still_running(job, what)
            written = outputs(gw, base)
            found = {task: writes_of(written, task) for task in TASKS}
            return found if all(found.values()) else None

        outlived = wait_for(lambda: every_task(
            lambda written, task: reached_hdfs_after(written, task, 0, submitted.max_ms), "its tasks outlived "
            "the submitted tokens"), WAIT_S, "a write of each task after the submitted token's max date")

        # No task writes while the job has no AM: the first attempt's last set, which nobody renews,
        # dies a renewal interval after its issue, maybe before the next attempt's set reaches them.
        hold.touch()
        wait_for(lambda: still_running(job, "its tasks held their writes") or all(
            (tmp_path / f"hold.{task}").exists() for task in TASKS), WAIT_S, "each task to hold its writes")
        killed_at = token_files.namenode_now_ms(gw, clock)
        killed_am = [proc.kill() or proc.pid for proc in am_processes(job.app_id)]
        assert killed_am, "no AM process of the job to kill: " + "".join(job.out)[-3000:]
        first_ended = wait_for(lambda: still_running(job, "its second attempt") or (
            len(found := attempts(cluster, job.app_id)) == 2 and found[0]["finishedTime"]), WAIT_S,
            "the RM to end the first AM attempt and start the second")
        _, relaunched = am_launch_tokens(cluster, gw, job.app_id, 2)
        hdfs_relaunched = [t for t in relaunched if t.kind == token_files.HDFS]
        assert hdfs_relaunched and all(t.max_ms < killed_at for t in hdfs_relaunched), (
            "the second AM attempt was launched with an HDFS token still alive", killed_at, relaunched)

        def second_set_installed():
            still_running(job, "the second AM attempt's set reached its tasks")
            files = [f for f in cluster.workdir.glob(f"data/nm*/local/usercache/*/appcache/{job.app_id}/"
                                                     "container_*_01_*/container_tokens")
                     if not f.parent.name.endswith("_000001")]  # the first attempt's task containers
            sets = [token_files.read_whole(gw, f) for f in files]
            return len(files) == len(TASKS) and all(
                tokens and token_files.hdfs_token(tokens).issued_ms > first_ended for tokens in sets)

        wait_for(second_set_installed, WAIT_S, "the adopted tasks' token files to hold the second AM attempt's set",
                 explain=lambda: second_am_log(cluster, job.app_id))
        hold.unlink()

        def with_second_attempts_set(written, task):
            return [n for n in rounds(written, task, 0) if written[n] > first_ended
                    and held(n).issued_ms > first_ended and not held(n).real_user][:1]

        wait_for(lambda: every_task(with_second_attempts_set, "its adopted tasks wrote"), WAIT_S,
                 "a write of each adopted task with a token of the second AM attempt's",
                 explain=lambda: second_am_log(cluster, job.app_id))
        die.touch()  # the tasks die (SIGKILL) at their next round: the second attempt restarts them
        run = job.wait(timeout=WAIT_S)
    finally:
        die.touch()
        hold.unlink(missing_ok=True)
        if submitted_only is not None:
            submitted_only.close()
        if job.proc.poll() is None:  # failed on the way: the client kills its application on Ctrl-C
            job.proc.send_signal(signal.SIGINT)
            with contextlib.suppress(subprocess.TimeoutExpired):
                job.proc.wait(timeout=60)
        late = without.wait(timeout=400)
        gw.call("clean", gw.fs.delete, plain, True)
    assert run.rc == 0, run.output[-3000:]
    written = outputs(gw, base)
    for task in TASKS:
        before, after = rounds(written, task, 0), rounds(written, task, 1)
        assert before == [f"{task}-a0-r{n}.txt" for n in range(len(before))], sorted(written)
        assert after == [f"{task}-a1-r{n}.txt" for n in range(2)], sorted(written)
        for name in after:  # the restarted tasks' token files held the second attempt's sets from their start
            assert held(name).issued_ms > first_ended and not held(name).real_user, (name, held(name))
    # every executor the new attempt adopted took that attempt's sets (its versions count from 1)
    adopted = [log.split("the AM moved", 1)[1] for d in cluster.container_dirs(run.app_id)
               for log in [(d / "executor.log").read_text(errors="replace") if (d / "executor.log").exists() else ""]
               if "the AM moved" in log]
    assert adopted and all("delegation tokens were renewed (set " in after for after in adopted), adopted
    assert "note: no keytab" not in run.stdout
    assert len(attempts(cluster, run.app_id)) == 2

    assert "note: no keytab, so this job runs on the delegation tokens it was submitted with" in late.stdout
    assert late.rc == 1, late.output[-3000:]
    diagnostics = cluster.app(late.app_id)["diagnostics"] + late.output
    assert "the job's delegation tokens have expired" in diagnostics, diagnostics[-3000:]
    assert "--principal and --keytab" in diagnostics
