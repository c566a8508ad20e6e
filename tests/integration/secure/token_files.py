"""Delegation tokens as Hadoop itself reads them, for the tests of jobs that outlive their tokens.

Every date here is a daemon's: a token's issue and max dates are the NameNode's (its identifier,
decoded by Token.decodeIdentifier in a client JVM), a file's modification time is the NameNode's
when the file was closed, an application attempt's start and end are the ResourceManager's. On
the one-host cluster they share one clock; the test's own clock is never compared with them.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

from py4j.java_gateway import GatewayParameters, JavaGateway, is_instance_of
from py4j.protocol import Py4JJavaError

from secure.conftest import environment
from tony_py.bridge.gateway import JvmLaunch, java_error

HDFS = "HDFS_DELEGATION_TOKEN"
DELEGATION_ID = "org.apache.hadoop.security.token.delegation.AbstractDelegationTokenIdentifier"


@dataclass(frozen=True)
class Token:
    kind: str
    sequence: int  # the issuer's own counter: equal kind and sequence, the same token
    owner: str
    real_user: str  # set on a token the RM asked for as a proxy user (YARN-2704), empty otherwise
    issued_ms: int
    max_ms: int


def read(gw, path: Path | str) -> list[Token]:
    """The delegation tokens of a token storage file (Credentials.readTokenStorageFile). Raises
    Py4JJavaError on a file still being written."""
    jvm = gw.gateway.jvm
    creds = jvm.org.apache.hadoop.security.Credentials.readTokenStorageFile(
        jvm.java.io.File(str(path)), jvm.org.apache.hadoop.conf.Configuration())
    out = []
    for token in creds.getAllTokens().toArray():
        ident = token.decodeIdentifier()
        if ident is None or not is_instance_of(gw.gateway, ident, DELEGATION_ID):
            continue  # the AM-RM token, a container token: no issue or max date
        out.append(Token(str(token.getKind()), ident.getSequenceNumber(), str(ident.getOwner()),
                         str(ident.getRealUser()), ident.getIssueDate(), ident.getMaxDate()))
    return out


def read_whole(gw, path: Path) -> list[Token] | None:
    """read(), or None while the file is missing or half written (the NodeManager writes a
    container's token file as it launches it)."""
    try:
        return read(gw, path) if path.is_file() else None
    except Py4JJavaError:
        return None


def hdfs_token(tokens: list[Token]) -> Token:
    """The one HDFS delegation token of a set (the default file system's: these jobs use no other)."""
    found = [t for t in tokens if t.kind == HDFS]
    assert len(found) == 1, f"not one HDFS delegation token: {tokens}"
    return found[0]


def write_hdfs_tokens_only(gw, source: Path, target: Path) -> Path:
    """A copy of a token file with its HDFS delegation tokens and nothing else (no RM token, no
    secret keys), mode 0600."""
    jvm = gw.gateway.jvm
    conf = jvm.org.apache.hadoop.conf.Configuration()
    creds = jvm.org.apache.hadoop.security.Credentials.readTokenStorageFile(jvm.java.io.File(str(source)), conf)
    kept = jvm.org.apache.hadoop.security.Credentials()
    for token in creds.getAllTokens().toArray():
        if str(token.getKind()) == HDFS:
            kept.addToken(token.getService(), token)
    target.touch(mode=0o600)
    kept.writeTokenStorageFile(jvm.org.apache.hadoop.fs.Path(target.as_uri()), conf)
    return target


def renew_interval_ms(gw) -> int:
    """The NameNode's renewal interval, as it answers (Spark's way, and TokenRenewal.java's): a
    token whose renewer is the gateway's user, renewed once, its new expiry less its issue date,
    then cancelled. The renewal comes a moment after the issue, so this is at most that moment
    longer than the interval: a bound on the side of a later first expiry."""
    jvm = gw.gateway.jvm
    conf = jvm.org.apache.hadoop.hdfs.HdfsConfiguration()
    fs = jvm.org.apache.hadoop.fs.FileSystem.get(conf)
    tokens = fs.addDelegationTokens(gw.user, jvm.org.apache.hadoop.security.Credentials())
    assert tokens, "the NameNode issued no delegation token"
    token = tokens[0]
    try:
        return token.renew(conf) - token.decodeIdentifier().getIssueDate()
    finally:
        token.cancel(conf)


def namenode_now_ms(gw, path: str) -> int:
    """The NameNode's clock now: the modification time of a file written now (set as it closes)."""
    gw.call("write " + path, gw.fs.writeText, path, "", 0o600)
    return int(gw.json("stat " + path, gw.fs.describe, path)["mtime"])


class TokensOnlyClient:
    """A client JVM whose only credentials are one token file (KRB5CCNAME names no cache, so no
    ticket either), started ahead, so that a write asked for on an event is made at once and not
    a JVM's start later (4 to 8 s on 2 loaded cores, measured with FsShell). Each write opens a
    new file system, whose connection to the NameNode authenticates with the token then."""

    def __init__(self, cluster, token_file: Path):
        with environment(HADOOP_CONF_DIR=str(cluster.conf_dir), KRB5_CONFIG=cluster.info["krb5_conf"],
                         KRB5CCNAME="FILE:/nonexistent/no-ticket", HADOOP_TOKEN_FILE_LOCATION=str(token_file)):
            self._launch = JvmLaunch()
            _, port, auth, _ = self._launch.result()
        self.gateway = JavaGateway(gateway_parameters=GatewayParameters(port=port, auth_token=auth,
                                                                        auto_convert=True))
        jvm = self.gateway.jvm
        self.conf = jvm.org.apache.hadoop.hdfs.HdfsConfiguration()
        jvm.org.apache.hadoop.security.UserGroupInformation.setConfiguration(self.conf)
        jvm.org.apache.hadoop.security.UserGroupInformation.getLoginUser()  # reads the token file now
        jvm.org.apache.hadoop.fs.FileSystem.newInstance(self.conf).close()  # the HDFS client's classes: no RPC

    def create(self, path: str) -> str | None:
        """Create an empty file: None once done, else the Java error's words."""
        jvm = self.gateway.jvm
        fs = jvm.org.apache.hadoop.fs.FileSystem.newInstance(self.conf)
        try:
            fs.create(jvm.org.apache.hadoop.fs.Path(path), True).close()
            return None
        except Py4JJavaError as exc:
            return java_error(exc)
        finally:
            with contextlib.suppress(Py4JJavaError):
                fs.close()  # its connection with it: the next write authenticates afresh

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.gateway.shutdown()
        self._launch.discard()  # stops the JVM
