"""Kerberos' pure parts: judging a client's credentials before it asks the cluster anything, the
keytab flags, the JVM options a krb5.conf needs, and the secure cluster's settings."""

from pathlib import Path

import pytest

from tony_py.bridge import credentials, jvm
from tony_py.bridge.credentials import CredentialsError, problem
from tony_py.client.prepare import prepare
from tony_py.client.flags import parse_args
from tony_py.cluster import cli, secure
from tony_py.cluster.processes import LocalCluster
from tony_py.config.xmlconf import read_xml
from tony_py.errors import EXIT_USAGE

NOW = 1_800_000_000_000
SECURE = {"secure": True, "user": "alice", "principal": "alice@TONY.TEST", "keytab": False, "tgt_end_ms": 0,
          "tokens": [], "token_file": None}


def test_an_insecure_cluster_needs_nothing():
    assert problem({"secure": False}, None, NOW) is None


def test_a_valid_ticket_is_enough():
    assert problem(dict(SECURE, tgt_end_ms=NOW + 60_000), None, NOW) is None


def test_no_ticket_says_kinit_and_the_flags(tmp_path):
    message = problem(SECURE, tmp_path / "krb5cc_0", NOW)
    assert "there is no ticket" in message and "kinit" in message and "--principal and --keytab" in message


def test_a_ticket_cache_that_gave_no_ticket_is_named_as_expired(tmp_path):
    cache = tmp_path / "krb5cc_0"
    cache.write_bytes(b"\x05\x04")
    message = problem(SECURE, cache, NOW)
    assert str(cache) in message and "expired" in message and "kinit" in message


def test_an_expired_ticket_is_named_with_its_principal():
    message = problem(dict(SECURE, tgt_end_ms=NOW - 1), None, NOW)
    assert message.startswith("the Kerberos ticket of alice@TONY.TEST has expired") and "kinit alice@TONY.TEST" in message


def test_a_token_file_with_both_tokens_is_enough_without_a_ticket():
    info = dict(SECURE, tokens=["HDFS_DELEGATION_TOKEN", "RM_DELEGATION_TOKEN"], token_file="/t/tokens")
    assert problem(info, None, NOW) is None


@pytest.mark.parametrize("tokens,missing", [(["HDFS_DELEGATION_TOKEN"], "RM_DELEGATION_TOKEN"),
                                            (["RM_DELEGATION_TOKEN"], "HDFS_DELEGATION_TOKEN"),
                                            ([], "HDFS_DELEGATION_TOKEN or RM_DELEGATION_TOKEN")])
def test_a_token_file_missing_a_token_names_the_file_and_the_kind(tokens, missing):
    message = problem(dict(SECURE, tokens=tokens, token_file="/t/tokens"), None, NOW)
    assert message.startswith(f"the token file /t/tokens holds no {missing}")


def test_the_ticket_cache_is_where_kinit_and_the_jdk_look():
    assert credentials.ticket_cache({"KRB5CCNAME": "FILE:/tmp/cc"}) == Path("/tmp/cc")
    assert credentials.ticket_cache({"KRB5CCNAME": "/tmp/cc2"}) == Path("/tmp/cc2")
    assert credentials.ticket_cache({"KRB5CCNAME": "KEYRING:persistent:0"}) is None
    assert str(credentials.ticket_cache({})).startswith("/tmp/krb5cc_")


def test_a_refused_keytab_login_is_one_line_naming_principal_and_keytab():
    java = ("org.apache.hadoop.security.KerberosAuthException: failure to login: for principal: bob@T from keytab "
            "/k javax.security.auth.login.LoginException: Unable to obtain password from user\n; caused by "
            "javax.security.auth.login.LoginException: Unable to obtain password from user\n")
    line = credentials.login_failure("bob@T", "/k", java)
    assert "\n" not in line
    assert line == "--principal bob@T --keytab /k: cannot log in: the keytab holds no key for bob@T " \
                   "(`klist -kt /k` lists the principals it holds)"


@pytest.mark.parametrize("flags,expected", [
    (["--principal", "a@T"], "--principal needs --keytab too"),
    (["--keytab", "/nonexistent.keytab"], "--keytab needs --principal too"),
    (["--principal", "a@T", "--keytab", "/nonexistent.keytab"], "--keytab /nonexistent.keytab: no such readable file"),
    (["--conf", "tony.keytab.user=a@T"], "--principal needs --keytab too"),
])
def test_keytab_flags_and_keys_are_checked_before_anything_starts(flags, expected, tmp_path):
    with pytest.raises(CredentialsError) as err:
        prepare(parse_args(["--executes", "true", *flags]))
    assert expected in str(err.value) and err.value.exit_code == EXIT_USAGE


def test_the_flags_set_tonys_keys_and_win_over_them(tmp_path):
    keytab = tmp_path / "a.keytab"
    keytab.write_bytes(b"\x05\x02")
    job = prepare(parse_args(["--executes", "true", "--conf", "tony.keytab.user=x@T", "--principal", "a@T",
                              "--keytab", str(keytab)]))
    assert job.conf.get("tony.keytab.user") == "a@T" and job.conf.get("tony.keytab.location") == str(keytab)
    assert not any("tony.keytab" in w for w in job.warnings)  # TonY's keys are read, not warned about


def test_a_jvm_is_told_where_krb5_conf_is_and_takes_hadoop_client_opts():
    assert jvm.kerberos_opts({"KRB5_CONFIG": "/etc/k.conf"}) == ["-Djava.security.krb5.conf=/etc/k.conf"]
    assert jvm.kerberos_opts({}) == []
    assert jvm.client_opts({"HADOOP_CLIENT_OPTS": "-Dsun.security.krb5.debug=true -Xmx1g"}) == [
        "-Dsun.security.krb5.debug=true", "-Xmx1g"]


def test_the_secure_cluster_config_turns_every_protection_on(tmp_path):
    cluster = LocalCluster(tmp_path / "sc")
    state = cluster._configure("3.4.3", tmp_path / "lib", kerberos=True)
    core = read_xml(Path(state.conf_dir) / "core-site.xml")
    hdfs = read_xml(Path(state.conf_dir) / "hdfs-site.xml")
    yarn = read_xml(Path(state.conf_dir) / "yarn-site.xml")
    assert core["hadoop.security.authentication"] == "kerberos"
    assert core["hadoop.security.authorization"] == "true" and core["hadoop.rpc.protection"] == "privacy"
    assert hdfs["dfs.block.access.token.enable"] == "true" and hdfs["dfs.data.transfer.protection"] == "privacy"
    assert hdfs["dfs.namenode.kerberos.principal"] == "nn/_HOST@TONY.TEST"
    assert yarn["yarn.resourcemanager.principal"] == "rm/_HOST@TONY.TEST"
    assert yarn["yarn.nodemanager.keytab"] == state.kerberos["keytabs"]["services"]
    assert yarn["yarn.log-aggregation-enable"] == "true"  # the NodeManagers load libhadoop.so (native.py)
    assert core["hadoop.security.crypto.codec.classes.aes.ctr.nopadding"].endswith("JceAesCtrCryptoCodec")
    assert "KRB5_CONFIG" in yarn["yarn.nodemanager.env-whitelist"].split(",")
    plain = LocalCluster(tmp_path / "pc")._configure("3.4.3", tmp_path / "lib")
    plain_core = read_xml(Path(plain.conf_dir) / "core-site.xml")
    assert plain_core["hadoop.security.authentication"] == "simple" and plain.kerberos is None
    assert "dfs.data.transfer.protection" not in read_xml(Path(plain.conf_dir) / "hdfs-site.xml")


def test_every_service_principal_maps_to_the_daemons_user_and_users_to_themselves():
    rules = secure.site_properties("/k", "hadoop", secure.Lifetimes())["core_security"]
    for service in secure.SERVICES:
        assert f"RULE:[2:$1@$0]({service}@TONY.TEST)s/.*/hadoop/" in rules
    assert "DEFAULT" in rules


def test_token_lifetimes_come_from_the_environment_for_renewal_tests(monkeypatch):
    monkeypatch.setenv("TONY_CLUSTER_TOKEN_RENEW_S", "60")
    monkeypatch.setenv("TONY_CLUSTER_TOKEN_MAX_S", "240")
    lifetimes = secure.Lifetimes.from_env()
    assert (lifetimes.token_renew_s, lifetimes.token_max_s, lifetimes.ticket_s) == (60, 240, 86_400)
    props = secure.site_properties("/k", "u", lifetimes)["hdfs_security"]
    assert "<name>dfs.namenode.delegation.token.renew-interval</name><value>60000</value>" in props
    # YARN-2704 (an AM attempt after the max lifetime still localizes): the RM replaces the app's
    # tokens once a third of the max lifetime is left, not at once (its default, 3 h, is longer)
    yarn = secure.site_properties("/k", "u", lifetimes)["yarn_security"]
    assert "<name>yarn.resourcemanager.proxy-user-privileges.enabled</name><value>true</value>" in yarn
    assert "<name>yarn.resourcemanager.system-credentials.valid-time-remaining</name><value>80000</value>" in yarn
    production = secure.site_properties("/k", "u", secure.Lifetimes())["yarn_security"]
    assert "<name>yarn.resourcemanager.system-credentials.valid-time-remaining</name><value>10800000</value>" in production


def test_secure_and_ha_together_is_exit_2_on_either_launcher(capsys):
    assert cli.main(["up", "--secure", "--ha"]) == 2
    assert cli.main(["up", "--secure", "--ha", "--docker"]) == 2
    assert "--ha and --secure together are not supported yet" in capsys.readouterr().err


def test_the_web_uis_want_spnego_on_both_secure_clusters(tmp_path):
    """One host: every HTTP/ key of the keytab (its servers bind 127.0.0.1, clients ask for
    HTTP/localhost); across hosts: HTTP/_HOST, each daemon its own host's."""
    state = LocalCluster(tmp_path / "sc")._configure("3.4.3", tmp_path / "lib", kerberos=True)
    core = read_xml(Path(state.conf_dir) / "core-site.xml")
    assert core["hadoop.http.authentication.type"] == "kerberos"
    assert core["hadoop.http.authentication.simple.anonymous.allowed"] == "false"
    assert core["hadoop.http.filter.initializers"] == "org.apache.hadoop.security.AuthenticationFilterInitializer"
    assert core["hadoop.http.authentication.kerberos.principal"] == "*"
    yarn = read_xml(Path(state.conf_dir) / "yarn-site.xml")
    assert yarn["yarn.nodemanager.webapp.spnego-principal"] == "*"
    across = secure.site_properties(secure.HOST_KEYTAB, "u", secure.Lifetimes(), http="HTTP/_HOST@TONY.TEST",
                                    dn="dn/_HOST@TONY.TEST")
    assert "<name>hadoop.http.authentication.kerberos.principal</name><value>HTTP/_HOST@TONY.TEST</value>" in \
        across["core_security"]
    assert "<name>dfs.datanode.kerberos.principal</name><value>dn/_HOST@TONY.TEST</value>" in across["hdfs_security"]
    assert f"<name>yarn.nodemanager.keytab</name><value>{secure.HOST_KEYTAB}</value>" in across["yarn_security"]


def test_across_hosts_every_host_has_its_own_principals_keytab_and_the_kdc_by_name(tmp_path):
    from tony_py.cluster.docker import DockerCluster

    cluster = DockerCluster(tmp_path / "dc")
    state = cluster._configure("3.4.3", tmp_path / "lib", "tony-py-node:test", 2, kerberos=True)
    krb = state.kerberos
    host = {n.name: n.hostname for n in state.nodes}
    assert host["kdc"].startswith("kdc.")
    assert krb["keytab_principals"]["namenode"] == (f"nn/{host['namenode']}@TONY.TEST",
                                                    f"HTTP/{host['namenode']}@TONY.TEST")
    assert krb["keytab_principals"]["nodemanager2"] == (f"nm/{host['nodemanager2']}@TONY.TEST",
                                                        f"HTTP/{host['nodemanager2']}@TONY.TEST")
    assert krb["keytab_principals"]["alice"] == ("alice@TONY.TEST",)
    assert "kdc" not in krb["keytab_principals"]  # the KDC's container has no principal of its own
    assert len(set(krb["keytabs"].values())) == len(krb["keytabs"])  # a keytab each
    assert krb["superuser"] == {"principal": f"nn/{host['namenode']}@TONY.TEST", "keytab": krb["keytabs"]["namenode"]}
    assert set(krb["principals"]) == {p for name, ps in krb["keytab_principals"].items()
                                      if name not in secure.USERS for p in ps}
    conf = Path(krb["krb5_conf"]).read_text()
    assert f"kdc = {host['kdc']}:{secure.KDC_PORT}" in conf and "default_realm = TONY.TEST" in conf
    assert secure.kdc_address(krb) == f"{host['kdc']}:{secure.KDC_PORT}"
    status = secure.status(krb)
    assert {"krb5_conf", "user_principal", "user_keytab", "kdc"} <= set(status)
    mounts = cluster._mounts(state, state.node("nodemanager1"))
    assert f"{krb['keytabs']['nodemanager1']}:{secure.HOST_KEYTAB}:ro" in mounts
    assert f"{krb['krb5_conf']}:/etc/krb5.conf:ro" in mounts
    assert not any(krb["keytabs"]["namenode"] in m for m in mounts)  # no other host's keys
