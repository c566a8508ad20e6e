"""HTTP to Hadoop's web UIs and REST APIs (ResourceManager, NodeManagers, NameNode) with the
user's Kerberos credentials where they ask for them: SPNEGO, as a Kerberized cluster's web UIs
run (`hadoop.http.authentication.type` kerberos).

Every REST call TonY-py makes to a cluster daemon goes through `session()`: the client's (`tony
logs`, `tony advise`'s look at the scheduler's queues), the Airflow trigger's, and the local cluster
launcher's readiness probe. On a cluster without SPNEGO nothing changes: the first answer is not a
401 and no token is made.

The client library is requests-gssapi (over python-gssapi, MIT Kerberos' GSSAPI): it is the
GSSAPI project's own auth for requests, which TonY-py already uses; it answers a 401 "Negotiate"
only (no token is sent to a server that did not ask), and takes credentials from a keytab through
GSSAPI's credential store as well as from the ticket cache. It is the optional extra
`tony-py[kerberos]` because python-gssapi builds against the system's Kerberos headers (Debian:
libkrb5-dev); without it a 401 Negotiate becomes a clear error saying what to install.
"""

from __future__ import annotations

import contextlib
import logging
import os
import zlib
from urllib.parse import urlsplit

import requests

try:  # the optional extra tony-py[kerberos]
    import gssapi
    import requests_gssapi
except ImportError:  # pragma: no cover - depends on the install
    gssapi = requests_gssapi = None

# requests-gssapi logs a failed GSSAPI step with its traceback before handing back the 401; the
# reason reaches the user in SpnegoError's one line instead.
logging.getLogger("requests_gssapi").setLevel(logging.CRITICAL)

INSTALL_HINT = "pip install 'tony-py[kerberos]' (it builds against libkrb5-dev)"


class SpnegoError(requests.RequestException):
    """A web UI asked for Kerberos and got none: what was asked, why no token, what to do. A
    RequestException, so every caller's handling of an unreachable server covers it."""


def asks_for_kerberos(resp: requests.Response) -> bool:
    return resp.status_code == 401 and "negotiate" in resp.headers.get("WWW-Authenticate", "").lower()


class _Auth(requests_gssapi.HTTPSPNEGOAuth if requests_gssapi else requests.auth.AuthBase):
    """requests-gssapi's SPNEGO, remembering why a token could not be made (it hands back the
    401 without saying), and with the realm's krb5.conf in place while it talks to the KDC."""

    def __init__(self, creds=None, krb5_conf: str | None = None):
        super().__init__(creds=creds, mutual_authentication=requests_gssapi.OPTIONAL)
        self.krb5_conf = krb5_conf
        self.failure: str | None = None

    def generate_request_header(self, response, host, is_preemptive=False):
        try:
            with krb5_config(self.krb5_conf):
                return super().generate_request_header(response, host, is_preemptive)
        except requests_gssapi.exceptions.SPNEGOExchangeError as exc:
            self.failure = str(exc)
            raise


@contextlib.contextmanager
def krb5_config(path: str | None):
    """MIT Kerberos reads KRB5_CONFIG each time it starts a context: the cluster launcher, which
    has no such variable of its own, sets it around its own calls only."""
    if path is None:
        yield
        return
    saved = os.environ.get("KRB5_CONFIG")
    os.environ["KRB5_CONFIG"] = path
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("KRB5_CONFIG", None)
        else:
            os.environ["KRB5_CONFIG"] = saved


def credentials(principal: str | None = None, keytab: str | None = None, ccache: str | None = None,
                krb5_conf: str | None = None):
    """GSSAPI initiator credentials: `principal` from `keytab` (into a memory cache of this
    process, the user's own ticket cache untouched), or a given ticket cache, or None: the default
    one (KRB5CCNAME), as kinit left it."""
    if gssapi is None or not (keytab or ccache):
        return None
    own = f"MEMORY:tony-py-{os.getpid()}-{zlib.crc32(f'{principal} {keytab}'.encode()):x}"  # one per identity
    store = {"ccache": ccache} if ccache else {"client_keytab": keytab, "ccache": own}
    name = gssapi.Name(principal, gssapi.NameType.kerberos_principal) if principal else None
    try:
        with krb5_config(krb5_conf):
            return gssapi.Credentials(name=name, usage="initiate", store=store)
    except gssapi.exceptions.GSSError as exc:
        where = f"keytab {keytab}" if keytab else f"ticket cache {ccache}"
        raise SpnegoError(f"no Kerberos credentials for {principal or 'the default principal'} from {where}: "
                          f"{exc.gen_message()}") from exc


class Session(requests.Session):
    """A requests session that answers SPNEGO with the given credentials (keeping the daemon's
    hadoop.auth cookie, so a poll negotiates once), and turns a refusal into a SpnegoError."""

    def __init__(self, creds=None, krb5_conf: str | None = None, creds_problem: str | None = None):
        super().__init__()
        self._auth = _Auth(creds, krb5_conf) if requests_gssapi and not creds_problem else None
        self.auth = self._auth
        self._creds_problem = creds_problem  # said only if a server asks for Kerberos
        self._jars: dict[str, requests.cookies.RequestsCookieJar] = {}

    def request(self, method, url, *args, **kwargs):
        # A cookie jar per host:port: cookies ignore ports, and each daemon signs its hadoop.auth
        # cookie with a secret of its own, so on one host the RM's would be sent to the NameNode,
        # refused there ("Invalid signature") and negotiated anew on every call.
        self.cookies = self._jars.setdefault(urlsplit(url).netloc, requests.cookies.RequestsCookieJar())
        resp = super().request(method, url, *args, **kwargs)
        if asks_for_kerberos(resp):
            failure = self._creds_problem or (self._auth.failure if self._auth else None)
            raise SpnegoError(refusal(url, failure, requests_gssapi is not None))
        if resp.status_code == 403 and any(asks_for_kerberos(r) for r in resp.history):
            raise SpnegoError(f"{url.split('?', 1)[0]} refused the Kerberos (SPNEGO) token it was sent (HTTP 403): "
                              "the server has no key for the name the token was made for (its HTTP/ principal "
                              "must match the host name in the address)")
        return resp


# How MIT Kerberos says there is no ticket to start from (an empty or missing cache). Not "Server
# not found in Kerberos database": that is the web server's HTTP/ principal missing, not the user's ticket.
_NO_TICKET = ("No credentials were supplied", "No Kerberos credentials", "No credentials cache found",
              "Credentials cache file")


def refusal(url: str, failure: str | None, can_negotiate: bool) -> str:
    """One line: which server asked for Kerberos, why it got no valid token, and what to do."""
    base = url.split("?", 1)[0]
    if not can_negotiate:
        return f"{base} asks for Kerberos (SPNEGO), and this Python has no GSSAPI: {INSTALL_HINT}"
    if failure and any(sign in failure for sign in _NO_TICKET):
        return (f"{base} asks for Kerberos (SPNEGO) and there is no ticket: run kinit (with KRB5_CONFIG set to the "
                f"realm's krb5.conf; from a keytab: kinit -kt KEYTAB PRINCIPAL) ({failure})")
    if failure:
        return f"{base} asks for Kerberos (SPNEGO) and no token could be made: {failure}"
    return f"{base} refused the Kerberos (SPNEGO) token it was sent (HTTP 401)"


def session(principal: str | None = None, keytab: str | None = None, ccache: str | None = None,
            krb5_conf: str | None = None) -> Session:
    """A session for one caller's REST calls, with the user's credentials (see credentials()).
    Credentials that cannot be had are an error only once a server asks for them."""
    try:
        return Session(credentials(principal, keytab, ccache, krb5_conf), krb5_conf)
    except SpnegoError as exc:
        return Session(None, krb5_conf, creds_problem=str(exc))
