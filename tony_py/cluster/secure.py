"""Kerberos for the local clusters (`tony cluster up --secure`, and with `--docker` across hosts):
what the realm holds (principals, keytabs, users) and the settings that make every daemon
authenticate, authorize and encrypt. Its KDC is started by kdc.py.

- The KDC is Hadoop's MiniKdc (Apache Kerby underneath) from Maven Central at the cluster's
  Hadoop version, realm TONY.TEST: on the one-host cluster a JVM bound to 127.0.0.1 on a free
  port; across hosts a container of its own (hosts_plan). Ticket and renewable lifetimes are set
  in its properties (MiniKdc applies no renewable maximum by itself).
- One host: every daemon has its own principal (nn, dn, rm, nm, HTTP; /localhost and /127.0.0.1,
  see HOSTS) from one keytab readable by the daemons' OS user only. Across hosts: each host has
  `<service>/<its host name>` principals in a keytab of its own, and the site files say _HOST.
  Either way they map to the daemons' OS user (auth_to_local), as nn -> hdfs and rm -> yarn do on
  a real cluster, so it is the HDFS superuser.
- Two users, alice and bob, each with a keytab of their own; their HDFS homes are 0700.
- RPC: authentication, service-level authorization, privacy (encrypted). Block access tokens.
  DataNodes speak SASL with privacy on their data port; their ports stay unprivileged through
  Hadoop's test switch `ignore.secure.ports.for.testing` instead of `dfs.http.policy=HTTPS_ONLY`
  with a keystore: the web UIs are plain HTTP, behind SPNEGO (spnego_properties; what answers it:
  tony_py/spnego.py). What that leaves untested: HTTPS on the web UIs.
- NodeManagers keep the DefaultContainerExecutor (the LinuxContainerExecutor's setuid binary is
  not in Maven Central): containers run as the NodeManager's OS user whoever submitted them, so
  tenant isolation on a node is not tested; HDFS and YARN permissions are.
- NodeManagers load Hadoop's native library (native.py) for SecureIOUtils, so logs are
  aggregated. SecureIOUtils reads a job's logs only if the job's owner owns the files, and here
  the daemons' OS user owns them all: logs come back for jobs of the daemons' principals (mapped
  to that user), not for alice's or bob's; `tony logs` says why (docs/kerberos.md#logs).
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import requests

from tony_py import spnego
from tony_py.bridge import jvm
from tony_py.cluster import native
from tony_py.errors import SetupError

REALM = "TONY.TEST"
# What _HOST becomes in a daemon's principal: the reverse name of 127.0.0.1 for most, the
# address itself where a daemon's host is set by address (dfs.datanode.hostname).
HOSTS = ("localhost", "127.0.0.1")
SERVICES = ("nn", "dn", "rm", "nm", "HTTP")
USERS = ("alice", "bob")


@dataclass(frozen=True)
class Lifetimes:
    """How long tickets and delegation tokens live. The defaults are production's (a day, a
    week); tests of renewal shorten them."""

    ticket_s: int = 86_400
    renewable_s: int = 7 * 86_400
    token_renew_s: int = 86_400  # delegation tokens: renew interval (HDFS and RM)
    token_max_s: int = 7 * 86_400  # and max lifetime

    @classmethod
    def from_env(cls) -> "Lifetimes":
        """TONY_CLUSTER_TOKEN_RENEW_S / _MAX_S / TICKET_S (seconds), for tests that need tokens
        to expire in minutes."""
        def get(name, default):
            raw = os.environ.get(f"TONY_CLUSTER_{name}_S")
            return int(raw) if raw else default
        base = cls()
        return cls(ticket_s=get("TICKET", base.ticket_s), renewable_s=get("RENEWABLE", base.renewable_s),
                   token_renew_s=get("TOKEN_RENEW", base.token_renew_s), token_max_s=get("TOKEN_MAX", base.token_max_s))


def principal(name: str, host: str = HOSTS[0]) -> str:
    return f"{name}/{host}@{REALM}" if name in SERVICES else f"{name}@{REALM}"


def service_principals() -> tuple[str, ...]:
    return tuple(principal(s, h) for s in SERVICES for h in HOSTS)


def preflight() -> None:
    """What a secure cluster needs from this machine, asked before anything starts: Kerberos'
    tools, and Hadoop's native library (fetched on first use)."""
    kerberos_tools()
    native.ensure_native_lib()


def kerberos_tools() -> tuple[str, str]:
    """MIT's kinit and ktutil (Debian's krb5-user): the JDK on Linux ships neither."""
    kinit, ktutil = shutil.which("kinit"), shutil.which("ktutil")
    if not kinit or not ktutil:
        raise SetupError("a secure cluster needs MIT Kerberos' kinit and ktutil: apt-get install krb5-user")
    return kinit, ktutil


# ---- the cluster's Kerberos state (cluster.json's "kerberos") -------------------------------------
def plan(workdir: Path, daemon_user: str) -> tuple[dict, dict[str, str]]:
    """Where the realm's files go, and the templates' security values that name them."""
    keytabs = workdir / "keytabs"
    lifetimes = Lifetimes.from_env()
    krb = {"krb5_conf": str(workdir / "kdc" / "krb5.conf"),
           "keytabs": {k: str(keytabs / f"{k}.keytab") for k in ("services", *USERS)},
           "principals": service_principals(),
           "keytab_principals": {"services": service_principals(), **{u: (principal(u),) for u in USERS}},
           "superuser": {"principal": principal("nn"), "keytab": str(keytabs / "services.keytab")},
           "lifetimes": lifetimes.__dict__}
    return krb, site_properties(krb["keytabs"]["services"], daemon_user, lifetimes)


def status(krb: dict) -> dict:
    """What a user of a secure cluster needs: the realm's krb5.conf and a user's keytab."""
    user = USERS[0]
    return {
        "realm": REALM,
        "krb5_conf": krb["krb5_conf"],
        "user_principal": principal(user),
        "user_keytab": krb["keytabs"][user],
        "users": {u: {"principal": principal(u), "keytab": krb["keytabs"][u]} for u in USERS},
        "kinit": f"KRB5_CONFIG={krb['krb5_conf']} kinit -kt {krb['keytabs'][user]} {principal(user)}",
        "kdc": kdc_address(krb),
    }


def kdc_address(krb: dict) -> str | None:
    """host:port of the realm's KDC, as its krb5.conf names it (None before the KDC wrote it)."""
    try:
        found = re.search(r"^\s*kdc\s*=\s*(\S+)", Path(krb["krb5_conf"]).read_text(), re.M)
    except OSError:
        return None
    return found.group(1) if found else None


def superuser(krb: dict) -> tuple[str, str]:
    """(principal, keytab) of the NameNode's principal: the HDFS superuser, and who the launcher
    asks the daemons' web endpoints as."""
    # (a one-host cluster started before cluster.json kept "superuser": its services keytab)
    su = krb.get("superuser") or {"principal": principal("nn"), "keytab": krb["keytabs"]["services"]}
    return su["principal"], su["keytab"]


# ---- a realm across hosts (the Docker cluster) ------------------------------------------------------
# Where each host's own keytab is, the same path on every host (a container mounts its host's
# there), as configuration management lays them out on a real cluster: the site files name one path.
HOST_KEYTAB = "/etc/security/keytabs/tony-node.keytab"
KDC_PORT = 88
# The service principals a host of each kind has (HTTP: its web server's, for SPNEGO).
HOST_SERVICES = {"namenode": ("nn", "HTTP"), "datanode": ("dn", "HTTP"), "resourcemanager": ("rm", "HTTP"),
                 "nodemanager": ("nm", "HTTP")}


def hosts_plan(workdir: Path, daemon_user: str, hosts: dict[str, tuple[str, str]], kdc: str,
               domain: str) -> tuple[dict, dict[str, str]]:
    """A realm for a cluster of real host names. hosts: daemon -> (kind, host name); kdc: the KDC's
    host name (its address, to bind, is the launcher's to fill in: kdc_bind). Every daemon has
    `<service>/<its host>@REALM` principals in a keytab of its own host; the site files say
    `<service>/_HOST@REALM`, which each daemon fills in with its own host name, and which a client
    fills in with the host name in the address it calls."""
    keytabs = workdir / "keytabs"
    lifetimes = Lifetimes.from_env()
    per_host = {daemon: tuple(f"{svc}/{host}@{REALM}" for svc in HOST_SERVICES[kind])
                for daemon, (kind, host) in hosts.items()}
    nn_daemon = next(d for d, (kind, _h) in hosts.items() if kind == "namenode")
    krb = {"krb5_conf": str(workdir / "krb5.conf"), "kdc_dir": str(workdir / "kdc"),
           "kdc_bind": {"address": None, "port": KDC_PORT},
           "principals": sorted({p for names in per_host.values() for p in names}),
           "keytabs": {name: str(keytabs / f"{name}.keytab") for name in (*per_host, *USERS)},
           "keytab_principals": {**per_host, **{u: (principal(u),) for u in USERS}},
           "superuser": {"principal": per_host[nn_daemon][0], "keytab": str(keytabs / f"{nn_daemon}.keytab")},
           "lifetimes": lifetimes.__dict__}
    Path(krb["krb5_conf"]).write_text(krb5_conf_text(f"{kdc}:{KDC_PORT}", domain))
    return krb, site_properties(HOST_KEYTAB, daemon_user, lifetimes, http=f"HTTP/_HOST@{REALM}", dn=f"dn/_HOST@{REALM}")


def krb5_conf_text(kdc: str, domain: str) -> str:
    """The realm's krb5.conf for clients and daemons alike: the KDC by host name, the cluster's
    domain in the realm. Host names are canonicalized as MIT and the JDK do by default (forward,
    then reverse lookup), so a web address by IP becomes the host's name, as on a real cluster."""
    return "\n".join([
        "[libdefaults]", f"    default_realm = {REALM}", "    udp_preference_limit = 1",
        "    dns_lookup_kdc = false", "    dns_lookup_realm = false",
        "[realms]", f"    {REALM} = {{", f"        kdc = {kdc}", "    }",
        "[domain_realm]", f"    .{domain} = {REALM}", f"    {domain} = {REALM}", ""])


# ---- the cluster's settings -----------------------------------------------------------------------
def _props(values: dict[str, str]) -> str:
    return "\n".join(f"  <property><name>{k}</name><value>{v}</value></property>" for k, v in values.items())


# The values that differ between the two (keyed by the templates' placeholders).
INSECURE = {"core_security": _props({"hadoop.security.authentication": "simple"}), "hdfs_security": "",
            "yarn_security": "", "log_aggregation": "true"}


def site_properties(services_keytab: str, daemon_user: str, lifetimes: Lifetimes,
                    http: str = "*", dn: str | None = None) -> dict[str, str]:
    """The values of the templates' security placeholders on a secure cluster (http: the web
    servers' principal, see spnego_properties; dn: the DataNodes')."""
    to_local = "\n".join([f"RULE:[2:$1@$0]({s}@{REALM})s/.*/{daemon_user}/" for s in SERVICES] + ["DEFAULT"])
    core = {
        "hadoop.security.authentication": "kerberos",
        "hadoop.security.authorization": "true",
        "hadoop.rpc.protection": "privacy",
        "hadoop.security.auth_to_local": to_local,
        # The NodeManagers' libhadoop.so (3.3.5) does not match 3.4's OpensslCipher: the JDK's codec only.
        "hadoop.security.crypto.codec.classes.aes.ctr.nopadding": "org.apache.hadoop.crypto.JceAesCtrCryptoCodec",
        **spnego_properties(services_keytab, http),
    }
    token = {"renew": lifetimes.token_renew_s * 1000, "max": lifetimes.token_max_s * 1000}
    hdfs = {
        "dfs.block.access.token.enable": "true",
        "dfs.namenode.kerberos.principal": f"nn/_HOST@{REALM}",
        "dfs.namenode.keytab.file": services_keytab,
        # The DataNode's host is set by address (dfs.datanode.hostname), so its _HOST would be
        # 127.0.0.1, while the NameNode checks it against the reverse name of that address.
        "dfs.datanode.kerberos.principal": dn or principal("dn"),
        "dfs.datanode.keytab.file": services_keytab,
        "dfs.web.authentication.kerberos.principal": http,
        "dfs.web.authentication.kerberos.keytab": services_keytab,
        "dfs.data.transfer.protection": "privacy",
        "ignore.secure.ports.for.testing": "true",
        "dfs.namenode.delegation.token.renew-interval": token["renew"],
        "dfs.namenode.delegation.token.max-lifetime": token["max"],
    }
    yarn = {
        "yarn.resourcemanager.principal": f"rm/_HOST@{REALM}",
        "yarn.resourcemanager.keytab": services_keytab,
        "yarn.nodemanager.principal": f"nm/_HOST@{REALM}",
        "yarn.nodemanager.keytab": services_keytab,
        "yarn.resourcemanager.webapp.spnego-principal": http,
        "yarn.resourcemanager.webapp.spnego-keytab-file": services_keytab,
        "yarn.nodemanager.webapp.spnego-principal": http,
        "yarn.nodemanager.webapp.spnego-keytab-file": services_keytab,
        "yarn.resourcemanager.delegation.token.renew-interval": token["renew"],
        "yarn.resourcemanager.delegation.token.max-lifetime": token["max"],
        # YARN-2704: the RM asks for new HDFS tokens (as a proxy user: core-site lets the daemon
        # user act for others) before the app's reach their max lifetime, and its NodeManagers
        # localize with them, so an AM attempt started after that lifetime can still start. It
        # does so once less than valid-time-remaining (3 h) is left, and then stops renewing the
        # submitted ones: with lifetimes of minutes that would be at once, so a third of it.
        "yarn.resourcemanager.proxy-user-privileges.enabled": "true",
        "yarn.resourcemanager.system-credentials.valid-time-remaining":
            min(3 * 3600, lifetimes.token_max_s // 3) * 1000,
    }
    # Under Kerberos a NodeManager opens container logs with SecureIOUtils, which needs Hadoop's
    # native library: the NodeManagers load it (daemon_jvm_options), so logs are aggregated.
    return {"core_security": _props(core), "hdfs_security": _props(hdfs), "yarn_security": _props(yarn),
            "log_aggregation": "true"}


def spnego_properties(services_keytab: str, http_principal: str = "*") -> dict[str, str]:
    """Every daemon's web UI and REST API behind SPNEGO, as a Kerberized production cluster runs
    them: a request without a valid Kerberos token gets 401 Negotiate, anonymous access is off.
    The ResourceManager swaps the filter for its own (RMAuthenticationFilterInitializer), which
    also takes its delegation tokens, and so covers the AM pages it proxies.

    http_principal: the name a daemon's web server accepts tokens for. `HTTP/_HOST@REALM` on a
    cluster of real host names (each daemon's own); on the one-host cluster "*", every HTTP/ key
    in the keytab (Hadoop's multi-homed form): its web servers bind 127.0.0.1, so _HOST would be
    HTTP/127.0.0.1, while a client's Kerberos library turns 127.0.0.1 into localhost by reverse
    lookup and asks for HTTP/localhost."""
    return {
        "hadoop.http.filter.initializers": "org.apache.hadoop.security.AuthenticationFilterInitializer",
        "hadoop.http.authentication.type": "kerberos",
        "hadoop.http.authentication.simple.anonymous.allowed": "false",
        "hadoop.http.authentication.kerberos.principal": http_principal,
        "hadoop.http.authentication.kerberos.keytab": services_keytab,
    }


def jvm_options(krb5_conf: str) -> list[str]:
    """The JDK does not read KRB5_CONFIG: every daemon JVM is told where the realm's krb5.conf is."""
    return [f"-Djava.security.krb5.conf={krb5_conf}"]


def daemon_jvm_options(krb: dict, daemon: str) -> list[str]:
    """A daemon's options on a secure cluster: the krb5.conf, and for a NodeManager (the one
    daemon that needs it) Hadoop's native library, which preflight() fetched and verified as the
    cluster came up (not again per daemon: each check hashes the file and loads it in a child)."""
    opts = jvm_options(krb["krb5_conf"])
    if daemon == "nodemanager":
        opts.append(f"-Djava.library.path={native.lib_dir()}")
    return opts


def web_session(krb: dict | None):
    """What the launcher asks the daemons' web endpoints with: on a secure cluster a SPNEGO
    session as the NameNode's principal (from the services keytab); else plain requests."""
    if krb is None:
        return requests
    name, keytab = superuser(krb)
    return spnego.session(name, keytab, krb5_conf=krb["krb5_conf"])


# ---- HDFS as its superuser -----------------------------------------------------------------------
def superuser_shell(kinit: str, conf_dir: str, lib_dir: str, krb5_conf: str, name: str, keytab: str,
                    ccache: Path) -> "callable":
    """A function that runs one FsShell command as the NameNode's principal `name` (the superuser)."""
    env = dict(os.environ, KRB5_CONFIG=krb5_conf, KRB5CCNAME=f"FILE:{ccache}")
    login = subprocess.run([kinit, "-kt", keytab, name], env=env, capture_output=True, text=True, timeout=30)
    if login.returncode != 0:
        raise SetupError(f"kinit as {name} failed: {login.stderr.strip()}")

    def fs(*args: str) -> None:
        cmd = [jvm.java_executable(), "-Xmx192m", *jvm.FAST_START_OPTS, *jvm.JDK17_OPENS,
               *jvm_options(krb5_conf), "-cp", f"{conf_dir}:{lib_dir}/*", "org.apache.hadoop.fs.FsShell", *args]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
        if proc.returncode != 0:
            tail = "\n".join(proc.stderr.strip().splitlines()[-5:])
            raise SetupError(f"hdfs dfs {' '.join(args)} as the superuser failed:\n{tail}")
    return fs


def prepare_hdfs(krb: dict, conf_dir: str, lib_dir: str) -> None:
    """Users' homes (0700, their own), a world-writable sticky /tmp and /tmp/logs (YARN's
    aggregated logs; the NodeManagers create each user's dir in it)."""
    kinit, _ktutil = kerberos_tools()
    name, keytab = superuser(krb)
    fs = superuser_shell(kinit, conf_dir, lib_dir, krb["krb5_conf"], name, keytab, Path(keytab).parent / "superuser.ccache")
    homes = [f"/user/{u}" for u in USERS]
    fs("-mkdir", "-p", *homes, "/tmp/logs")
    for user in USERS:
        fs("-chown", f"{user}:{user}", f"/user/{user}")
    fs("-chmod", "700", *homes)
    fs("-chmod", "1777", "/tmp", "/tmp/logs")
