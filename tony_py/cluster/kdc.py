"""The secure clusters' KDC: Hadoop's MiniKdc (Apache Kerby) from Maven Central, a JVM of its own
(a process on the one-host cluster, a container of its own across hosts), and the keytabs cut
from the one keytab it writes for every principal: services.keytab on the one-host cluster, one
per host across hosts, and one per user. secure.py says what the realm holds; this starts it."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from pathlib import Path

from tony_py.bridge import jvm
from tony_py.cluster.secure import USERS, Lifetimes, kerberos_tools, principal
from tony_py.errors import SetupError

KDC_MAIN = "org.apache.hadoop.minikdc.MiniKdc"
KDC_START_S = 60.0


def kdc_dir(krb: dict) -> Path:
    """Where MiniKdc keeps its files (on the one-host cluster its krb5.conf is the realm's)."""
    return Path(krb.get("kdc_dir") or Path(krb["krb5_conf"]).parent)


def fresh_kdc_command(krb: dict, lib: Path, log: Path, java: str | None = None) -> list[str]:
    """The KDC's command line, in an emptied dir: a new KDC has new keys, nothing of an old one
    (krb5.conf, keytab, log) may be taken for its own. java: the JVM that runs it (a container's)."""
    where = kdc_dir(krb)
    shutil.rmtree(where, ignore_errors=True)
    where.mkdir(parents=True)
    log.unlink(missing_ok=True)
    bind = krb.get("kdc_bind") or {}
    return kdc_command(lib, where, Lifetimes(**krb["lifetimes"]), java=java, address=bind.get("address", "127.0.0.1"),
                       port=bind.get("port", 0), principals=tuple(krb["principals"]))


def finish_kdc_start(krb: dict, log: Path, alive) -> None:
    """Wait for the KDC, then cut the keytabs from its one."""
    _kinit, ktutil = kerberos_tools()
    where = kdc_dir(krb)
    wait_kdc(where, log, alive)
    write_keytabs(ktutil, where, {name: (Path(path), tuple(krb["keytab_principals"][name]))
                                  for name, path in krb["keytabs"].items()})


def kdc_command(lib: Path, kdc_dir: Path, lifetimes: Lifetimes, java: str | None = None, address: str = "127.0.0.1",
                port: int = 0, principals: tuple[str, ...] = ()) -> list[str]:
    props = kdc_dir / "kdc.properties"
    props.write_text("\n".join([
        "org.name=TONY", "org.domain=TEST", f"kdc.bind.address={address}", f"kdc.port={port}",
        "instance=DefaultKrbServer", "transport=TCP", "debug=false",
        f"max.ticket.lifetime={lifetimes.ticket_s * 1000}",
        "min.ticket.lifetime=1000",  # kinit -l 2s may ask for a ticket that expires in a test
        f"max.renewable.lifetime={lifetimes.renewable_s * 1000}",
    ]) + "\n")
    everyone = [p.split("@")[0] for p in (*principals, *map(principal, USERS))]
    return [java or jvm.java_executable(), "-Xmx128m", *jvm.FAST_START_OPTS, "-cp", f"{lib}/*", KDC_MAIN,
            str(kdc_dir), str(props), str(kdc_dir / "all.keytab"), *everyone]


def wait_kdc(kdc_dir: Path, log: Path, alive, timeout: float = KDC_START_S) -> Path:
    """Until MiniKdc says it runs (its krb5.conf and keytab written); the krb5.conf's path."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        if "MiniKdc Running" in text and (kdc_dir / "krb5.conf").exists():
            return kdc_dir / "krb5.conf"
        if not alive():
            tail = "\n".join(text.strip().splitlines()[-10:])
            raise SetupError(f"the KDC exited during start; see {log}:\n{tail}")
        time.sleep(0.1)
    raise SetupError(f"the KDC did not start in {timeout:.0f} s; see {log}")


def split_keytab(ktutil: str, source: Path, target: Path, keep: tuple[str, ...]) -> None:
    """`target` holds the keys of `keep` only, mode 0600 (MiniKdc writes one keytab for all)."""
    listing = subprocess.run([ktutil], input=f"rkt {source}\nlist\nquit\n", capture_output=True, text=True,
                             timeout=30).stdout
    slots = re.findall(r"^\s*(\d+)\s+\d+\s+(\S+)\s*$", listing, re.M)
    drop = [int(n) for n, name in slots if name not in keep]
    if not slots or len(drop) == len(slots):
        raise SetupError(f"ktutil found none of {', '.join(keep)} in {source}")
    script = [f"rkt {source}"] + [f"delent {n}" for n in sorted(drop, reverse=True)] + [f"wkt {target}", "quit"]
    target.unlink(missing_ok=True)
    proc = subprocess.run([ktutil], input="\n".join(script) + "\n", capture_output=True, text=True, timeout=30)
    if not target.exists():
        raise SetupError(f"ktutil could not write {target}: {proc.stderr.strip()}")
    target.chmod(0o600)


def write_keytabs(ktutil: str, kdc_dir: Path, keytabs: dict[str, tuple[Path, tuple[str, ...]]]) -> None:
    """Each keytab (name -> (path, its principals)) cut from MiniKdc's one, all 0600 in a 0700 dir:
    services.keytab (every daemon) on the one-host cluster, a keytab per host across hosts, and
    one per user."""
    source = kdc_dir / "all.keytab"
    for path, keep in keytabs.values():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.parent.chmod(0o700)
        split_keytab(ktutil, source, path, keep)
    source.unlink()
