"""SPNEGO on the secure cluster's web UIs, as a Kerberized production cluster runs them
(`hadoop.http.authentication.type` kerberos, anonymous access off): every daemon's page and REST
API refuses a request without a Kerberos token, and every REST call TonY-py makes (tony_py/spnego.py)
gets through with the user's own credentials: a ticket cache or a keytab. The AM's page, through the
ResourceManager's proxy, opens in Chromium with a ticket and is refused without one."""

from __future__ import annotations

import contextlib
import json
import os

import pytest
import requests

from support import CHROMIUM, CHROMIUM_ARGS, Background, screenshot, wait_for
from tony_py import spnego
from tony_py.airflow import follow
from tony_py.cluster import secure
from tony_py.config import yarnsite


def web_endpoints(cluster) -> dict[str, str]:
    """One page or REST resource of each daemon's web server."""
    out = {"ResourceManager REST": f"{cluster.rm_web}/ws/v1/cluster/info",
           "ResourceManager page": f"{cluster.rm_web}/cluster",
           "NameNode JMX": f"{cluster.nn_web}/jmx?qry=Hadoop:service=NameNode,name=NameNodeInfo"}
    for nm in cluster.nodemanagers:
        out[f"NodeManager {nm['index']} REST"] = f"http://127.0.0.1:{nm['nm_web_port']}/ws/v1/node/info"
    return out


def alice(cluster) -> spnego.Session:
    """alice's REST calls as `tony` makes them: with her ticket cache (kinit's)."""
    return spnego.session(ccache=f"FILE:{cluster.ccache}", krb5_conf=cluster.info["krb5_conf"])


@contextlib.contextmanager
def chromium_with_ticket(cluster, ccache: str, profile):
    """Debian's chromium, headless, with the user's ticket cache and the realm's krb5.conf, allowed
    to answer Negotiate for this cluster's hosts (--auth-server-allowlist, as a browser policy would
    on users' desktops). On Linux Chromium loads the GSSAPI library only once its profile has seen
    a Negotiate challenge (Local State's net.received_http_auth_negotiate_headers, which then
    restarts its network service): the profile starts with it set, as a user's would after the
    first visit."""
    from playwright.sync_api import sync_playwright

    profile.mkdir()
    (profile / "Local State").write_text(json.dumps({"net": {"received_http_auth_negotiate_headers": True}}))
    env = dict(os.environ, KRB5_CONFIG=cluster.info["krb5_conf"], KRB5CCNAME=ccache)
    with sync_playwright() as pw:
        browser = pw.chromium.launch_persistent_context(
            str(profile), executable_path=CHROMIUM, headless=True, env=env,
            args=[*CHROMIUM_ARGS, "--auth-server-allowlist=127.0.0.1,localhost"])
        try:
            yield browser
        finally:
            browser.close()


def test_every_daemons_web_ui_wants_kerberos_and_takes_the_users_ticket_or_keytab(cluster, tmp_path):
    bob = spnego.session(secure.principal("bob"), cluster.keytab("bob"), krb5_conf=cluster.info["krb5_conf"])
    nobody = spnego.session(ccache=f"FILE:{tmp_path / 'empty.cc'}", krb5_conf=cluster.info["krb5_conf"])
    for what, url in web_endpoints(cluster).items():
        anonymous = requests.get(url, timeout=10)
        assert anonymous.status_code == 401 and spnego.asks_for_kerberos(anonymous), (what, anonymous.status_code)
        for who, session in (("alice (ticket cache)", alice(cluster)), ("bob (keytab)", bob)):
            resp = session.get(url, timeout=10)
            assert resp.status_code == 200, (what, who, resp.status_code, resp.text[:300])
        with pytest.raises(spnego.SpnegoError) as refused:
            nobody.get(url, timeout=10)
        assert "asks for Kerberos (SPNEGO) and there is no ticket: run kinit" in str(refused.value), refused.value
        assert url.split("?")[0] in str(refused.value)


def test_the_am_page_through_the_proxy_and_the_rest_calls_of_a_running_job(cluster, probe_args, tmp_path,
                                                                            monkeypatch):
    """While alice's job runs: its AM's status through the RM's proxy, the Airflow trigger's look
    and `tony advise`'s look at the queues, each with her ticket; none of them without it."""
    release = tmp_path / "release"
    job = Background(cluster, probe_args("tony.worker.instances=1", "tony.worker.memory=512m",
                                         params=f"--until-file {release}"))
    try:
        wait_for(lambda: job.app_id and cluster.app(job.app_id).get("state") == "RUNNING", 120, "the job to run")
        proxied = f"{cluster.rm_web}/proxy/{job.app_id}/"
        status = wait_for(lambda: (r := alice(cluster).get(proxied + "status.json", timeout=10)).ok
                          and (s := r.json()).get("tasks") and s["tasks"][0]["state"] == "RUNNING" and s,
                          120, "the AM's status through the proxy")
        assert status["tasks"][0]["name"] == "worker:0"
        assert requests.get(proxied, timeout=10).status_code == 401  # the proxy wants Kerberos too

        # The AM's page through the proxy in Chromium: with alice's ticket it renders her task...
        with chromium_with_ticket(cluster, f"FILE:{cluster.ccache}", tmp_path / "with") as browser:
            page = browser.new_page()
            assert page.goto(proxied).status == 200
            # the page's own poll shows the task (RUNNING in status.json above): a bound for a loaded machine
            page.wait_for_selector("tr[data-task='worker:0'] td.state.RUNNING", timeout=120_000)
            assert screenshot(page, "secure-am-page-through-proxy.png").stat().st_size > 10_000
        # ...and without a ticket the proxy answers 401, and no page of the AM's comes through
        with chromium_with_ticket(cluster, f"FILE:{tmp_path / 'empty.cc'}", tmp_path / "without") as browser:
            page = browser.new_page()
            assert page.goto(proxied).status == 401
            assert page.locator("tr[data-task]").count() == 0

        # The Airflow trigger's look at the RM (it runs in the worker, with the worker's ticket)
        monkeypatch.setenv("KRB5_CONFIG", cluster.info["krb5_conf"])
        monkeypatch.setenv("KRB5CCNAME", f"FILE:{cluster.ccache}")
        assert follow.rm_app([cluster.rm_web], job.app_id)["state"] == "RUNNING"
        # `tony advise`'s look at the queues' room (tony_py/config/yarnsite.py)
        assert dict(yarnsite.queue_room(str(cluster.conf_dir))).get("default", 0) > 0
        monkeypatch.setenv("KRB5CCNAME", f"FILE:{tmp_path / 'empty.cc'}")
        with pytest.raises(OSError, match="asks for Kerberos .SPNEGO. and there is no ticket"):
            follow.rm_app([cluster.rm_web], job.app_id)
        assert yarnsite.queue_room(str(cluster.conf_dir)) == ()
    finally:
        release.touch()
    run = job.wait(timeout=180)
    assert run.rc == 0, run.output[-3000:]
