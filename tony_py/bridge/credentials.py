"""Whether the client can talk to a Kerberos cluster, judged before it asks the cluster anything.

On a secure cluster a client without credentials otherwise fails deep in its first RPC with
"GSS initiate failed" (or retries for minutes); here it stops with one line that says what to run.
The JVM reports who it is (ClientBridge.credentialsJson: principal, whether a ticket-granting
ticket was found and until when, which token kinds it holds); the judgement is pure and unit-tested.
The JDK loads no expired ticket from a ticket cache, so "a cache file exists but gave no ticket"
means expired (or for another realm).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from tony_py.errors import UsageError

RM_TOKEN = "RM_DELEGATION_TOKEN"
HDFS_TOKEN = "HDFS_DELEGATION_TOKEN"
# Said by every command that reaches the cluster (submit, logs, advise, history, portal): only
# submit takes the keytab flags, so the hint names it, and kinit -kt for the others.
FLAGS_HINT = ("or from a keytab `kinit -kt KEYTAB PRINCIPAL` (tony submit also takes --principal and --keytab: "
              "tony.keytab.user / tony.keytab.location)")


class CredentialsError(UsageError):
    """No usable Kerberos credentials: nothing was staged or submitted (exit 2)."""


def ticket_cache(env: dict[str, str] | None = None) -> Path | None:
    """The file ticket cache kinit writes and the JDK reads (KRB5CCNAME FILE:, else
    /tmp/krb5cc_<uid>); None for other cache types (KEYRING, KCM), which the JDK cannot read."""
    env = os.environ if env is None else env
    name = env.get("KRB5CCNAME", "")
    if not name:
        return Path(f"/tmp/krb5cc_{os.getuid()}")
    if name.startswith("FILE:"):
        return Path(name[5:])
    return None if ":" in name else Path(name)


def problem(info: dict, cache: Path | None, now_ms: float | None = None) -> str | None:
    """What is missing for a secure cluster, as one line; None if nothing (or not secure)."""
    if not info.get("secure"):
        return None
    now_ms = time.time() * 1000 if now_ms is None else now_ms
    principal = info.get("principal") or info.get("user") or "you"
    tgt_end = info.get("tgt_end_ms") or 0
    if tgt_end > now_ms:
        return None
    if tgt_end:
        return f"the Kerberos ticket of {principal} has expired: run `kinit {principal}` again, {FLAGS_HINT}"
    tokens = set(info.get("tokens") or ())
    token_file = info.get("token_file")
    if tokens or token_file:
        missing = [kind for kind in (HDFS_TOKEN, RM_TOKEN) if kind not in tokens]
        if not missing:
            return None  # a scheduler's token file (Azkaban, Oozie): enough to submit
        where = f"the token file {token_file}" if token_file else "the credentials"
        return (f"{where} holds no {' or '.join(missing)} and there is no Kerberos ticket to fetch one: "
                f"have the scheduler fetch it, run `kinit`, {FLAGS_HINT}")
    if cache is not None and cache.exists():
        return (f"the ticket cache {cache} holds no valid ticket for this cluster's realm (expired?): "
                f"run `kinit <principal>`, {FLAGS_HINT}")
    return f"this cluster uses Kerberos and there is no ticket: run `kinit <principal>`, {FLAGS_HINT}"


def check_keytab(principal: str | None, keytab: str | None) -> None:
    """--principal and --keytab come together, and the keytab must be a readable file."""
    if bool(principal) != bool(keytab):
        given, other = ("--principal", "--keytab") if principal else ("--keytab", "--principal")
        raise CredentialsError(f"{given} needs {other} too (tony.keytab.user and tony.keytab.location)")
    if keytab and not (os.path.isfile(keytab) and os.access(keytab, os.R_OK)):
        raise CredentialsError(f"--keytab {keytab}: no such readable file")


def login_failure(principal: str, keytab: str, java_message: str) -> str:
    """One line for a keytab login the JDK refused (its own words are spread over causes)."""
    reason = " ".join(java_message.split("caused by")[-1].split()).strip(" ;)")
    reason = reason.removeprefix("javax.security.auth.login.LoginException: ")
    if "Unable to obtain password" in reason:
        reason = f"the keytab holds no key for {principal}"
    return (f"--principal {principal} --keytab {keytab}: cannot log in: {reason} "
            f"(`klist -kt {keytab}` lists the principals it holds)")
