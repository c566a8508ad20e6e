"""The Docker cluster's pure parts: its definition (one per daemon, own host names), addresses
in the network-test range, the /etc/hosts block, the image recipe and the CLI's checks."""

import ipaddress
from pathlib import Path

import pytest

from tony_py.cluster import cli, hosts, image
from tony_py.cluster.docker import TEST_RANGE, DockerCluster, node_addresses
from tony_py.config.xmlconf import read_xml


def test_addresses_are_fixed_per_daemon_and_inside_the_test_range():
    subnet = ipaddress.ip_network("198.19.7.0/24")
    names = ["namenode", "datanode", "resourcemanager", "nodemanager1", "nodemanager2", "nodemanager12"]
    addresses = node_addresses(subnet, names)
    assert addresses == ["198.19.7.10", "198.19.7.11", "198.19.7.12", "198.19.7.21", "198.19.7.22", "198.19.7.32"]
    assert all(ipaddress.ip_address(a) in TEST_RANGE for a in addresses)
    assert TEST_RANGE == ipaddress.ip_network("198.18.0.0/15")  # RFC 2544


def test_every_daemon_gets_its_own_host_name_in_the_rendered_config(tmp_path):
    cluster = DockerCluster(tmp_path / "dc")
    state = cluster._configure("3.4.3", tmp_path / "lib", "tony-py-node:test", 3)
    hostnames = [n.hostname for n in state.nodes]
    assert len(set(hostnames)) == 6 and all(h.endswith(".tony.test") for h in hostnames)
    core = read_xml(Path(state.conf_dir) / "core-site.xml")
    yarn = read_xml(Path(state.conf_dir) / "yarn-site.xml")
    hdfs = read_xml(Path(state.conf_dir) / "hdfs-site.xml")
    assert core["fs.defaultFS"] == f"hdfs://{state.node('namenode').hostname}:8020"
    assert yarn["yarn.resourcemanager.hostname"] == state.node("resourcemanager").hostname
    assert hdfs["dfs.datanode.hostname"] == state.node("datanode").hostname
    # YARN's liveness timers are the test cluster's, not Hadoop's 10 minutes
    assert int(yarn["yarn.nm.liveness-monitor.expiry-interval-ms"]) == 30_000
    gpus = []
    for i in (1, 2, 3):
        nm = read_xml(tmp_path / "dc" / f"conf-nm{i}" / "yarn-site.xml")
        assert nm["yarn.nodemanager.hostname"] == state.node(f"nodemanager{i}").hostname
        assert nm["yarn.nodemanager.address"].startswith(state.node(f"nodemanager{i}").hostname + ":")
        gpus.append("yarn.nodemanager.resource-plugins" in nm)
    assert gpus == [True, True, False]  # GPUs counted per node: two nodes with the stand-in, one without


def test_the_hosts_block_is_replaced_and_withdrawn_leaving_other_lines(tmp_path):
    path = tmp_path / "hosts"
    path.write_text("127.0.0.1 localhost\n10.0.0.5 other\n")
    assert hosts.publish("ab12", {"nn.ab12.tony.test": "198.18.1.10"}, path) is None
    assert hosts.publish("ab12", {"nn.ab12.tony.test": "198.18.1.10", "rm.ab12.tony.test": "198.18.1.12"}, path) is None
    hosts.publish("cd34", {"nn.cd34.tony.test": "198.18.2.10"}, path)
    text = path.read_text()
    assert text.count("nn.ab12.tony.test") == 1 and "198.18.1.12 rm.ab12.tony.test" in text
    hosts.withdraw("ab12", path)
    text = path.read_text()
    assert "ab12" not in text and "nn.cd34.tony.test" in text and text.startswith("127.0.0.1 localhost\n10.0.0.5 other\n")


def test_an_unwritable_hosts_file_gives_the_lines_to_add(tmp_path):
    note = hosts.publish("ab12", {"nn.ab12.tony.test": "198.18.1.10"}, tmp_path / "missing" / "hosts")
    assert "198.18.1.10 nn.ab12.tony.test" in note and "add these lines" in note


def test_the_image_tag_follows_the_recipe_not_the_mirror():
    assert image.image_tag() == image.image_tag()
    assert image.image_tag().startswith("tony-py-node:")
    cmd = image._mmdebstrap_command("http://mirror.example/debian")
    assert cmd[-1] == "http://mirror.example/debian" and "mirror.example" not in image.recipe()
    assert any(c.startswith("--essential-hook=") and "man1" in c for c in cmd)  # openjdk's postinst needs it
    assert "openjdk-17-jre-headless" in cmd[2] and "python3" in cmd[2]


@pytest.mark.parametrize("nodes", ["0", "51"])
def test_nodes_out_of_range_is_exit_2_with_the_range(nodes, capsys):
    assert cli.main(["up", "--docker", "--nodes", nodes, "--workdir", "/nonexistent"]) == 2
    assert "--nodes must be 1..50" in capsys.readouterr().err
