"""The module's nftables provider under real `puppet apply`, its `nft` in a network
namespace of our own (typhapki::nftables::nft is a wrapper that enters it).

The first run removes the rule a ferm provider left (ferm reloaded once) and writes the
file while no ruleset includes it (nothing to refresh); once
the fleet's ruleset loads it, a moved node reaches the kernel's sets through the set
update alone (a table the ruleset does not hold survives: no reload), a second run
changes nothing. (A node that stops resolving fails the step as it fails ferm's:
tests/puppet/test_module_apply.py, tests/commands/test_nft.py.)
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require, require_root
from tests.firewall.test_nft import fleet_ruleset, kernel_ports, kernel_set
from tests.puppet.test_lint import DnsFactory, dnsmasq_server_fixture  # noqa: F401 - fixture
from tests.puppet.test_module_apply import RECORDS, _ca_data, _node, staged_clusters
from tests.support.puppet import EXEC_PATH, PuppetNode
from typhapki.cli import nodeconfig

pytestmark = pytest.mark.once  # heavy end to end: CI's Debian leg only (tests/conftest.py)


@pytest.fixture
def netns() -> Iterator[str]:
    require_root()
    require("ip", "nft")
    name = f"tpmod{os.getpid() % 100000}{time.monotonic_ns() % 1000}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=30)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def nft_node(tmp_path: Path, ca_dir: Path, netns: str, nameserver: str) -> PuppetNode:
    wrapper = tmp_path / "nft-in-netns"
    wrapper.write_text(f'#!/bin/sh\nexec ip netns exec {netns} nft "$@"\n')
    wrapper.chmod(0o755)
    # `typhapki nft --kernel` (the refresh's unless) runs the nft on the execs' PATH.
    bin_dir = tmp_path / "nft-bin"
    bin_dir.mkdir()
    (bin_dir / "nft").write_text(f'#!/bin/sh\nexec ip netns exec {netns} /usr/sbin/nft "$@"\n')
    (bin_dir / "nft").chmod(0o755)
    node = _node(tmp_path, "local", **_ca_data(ca_dir))
    root = node.root
    node.data.update(
        {
            "typhapki::exec_path": [str(bin_dir), *EXEC_PATH],
            "typhapki::firewall_provider": "nftables",
            "typhapki::nftables::output": str(root / "etc" / "nftables.d" / "calico-typha.nft"),
            "typhapki::nftables::manage_output_dir": True,
            "typhapki::nftables::sets_output": str(root / "etc" / "typhapki" / "sets.nft"),
            "typhapki::nftables::nft": str(wrapper),
            "typhapki::nftables::nameservers": [nameserver],
        }
    )
    return node


def nft(netns: str, *args: str | Path) -> str:
    proc = subprocess.run(
        ["ip", "netns", "exec", netns, "nft", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def v4_set(netns: str) -> list[str]:
    return sorted(str(n.network_address) for n in kernel_set(netns, "calico_typha_v4"))


def test_nftables_provider_refreshes_the_live_sets_without_a_reload(
    tmp_path: Path, ca_dir: Path, netns: str, dnsmasq_server: DnsFactory
) -> None:
    node = nft_node(tmp_path, ca_dir, netns, dnsmasq_server(RECORDS).arg)
    fragment = Path(node.data["typhapki::nftables::output"])
    # Issue 39: the node was on the ferm provider before; its rule must not stay behind.
    node.ferm_rule.parent.mkdir(parents=True, exist_ok=True)
    node.ferm_rule.write_text("&R_SERVICE(tcp, 5473, (10.64.0.1));\n")
    first = node.apply()
    assert first.returncode == 2, first.stdout
    # No ruleset loads the sets yet: `--kernel` says not_loaded, nothing to refresh.
    assert "Exec[typhapki-nft-sets]" not in first.stdout
    assert not node.ferm_rule.exists()  # removed, and ferm reloaded once without it
    assert node.log("ferm-reloads") == ["reload"]
    assert all(f"\t\t{a},\n" in fragment.read_text() for addrs in RECORDS.values() for a in addrs)
    commands = nodeconfig.load(node.config_file).commands  # the file as typhapki reads it
    assert "nft" in commands and "ferm" not in commands

    # The fleet's ruleset includes the file; a table of someone else's is live beside it.
    ruleset = tmp_path / "nftables.conf"
    ruleset.write_text(fleet_ruleset(fragment))
    nft(netns, "-f", ruleset)
    nft(netns, "add", "table", "inet", "elsewhere")
    assert v4_set(netns) == ["10.64.0.1", "10.64.0.2"]

    # A node moves: the file and the live sets follow, the ruleset is not reloaded.
    moved = dict(RECORDS, **{"kubestage1001.eqiad.wmnet": ["10.64.0.20", "2620:0:861:101::20"]})
    node.data["typhapki::nftables::nameservers"] = [dnsmasq_server(moved).arg]
    run = node.apply()
    assert run.returncode == 2, run.stdout
    assert v4_set(netns) == ["10.64.0.1", "10.64.0.20"]
    v6 = kernel_set(netns, "calico_typha_v6")
    assert ipaddress.ip_network("2620:0:861:101::20/128") in v6
    assert "table inet elsewhere" in nft(netns, "list", "tables")
    assert "10.64.0.20" in fragment.read_text()

    again = node.apply()
    assert again.returncode == 0, again.stdout
    assert node.log("ferm-reloads") == ["reload"]

    # issue 32: the cluster's tls_stage moves to retire in hiera; the live port set
    # follows through the set update alone (the other table survives: no reload): the
    # TLS Typha's port open, the plain one closed (both open while both Typhas run:
    # tests/puppet/test_module_apply.py, tests/firewall/test_nft_netns.py).
    assert kernel_ports(netns) == [5473]
    node.data["kubernetes::clusters"] = staged_clusters("retire")
    staged = node.apply()
    assert staged.returncode == 2, staged.stdout
    assert kernel_ports(netns) == [5474]
    assert v4_set(netns) == ["10.64.0.1", "10.64.0.20"]  # strict, as hiera's mode
    assert "table inet elsewhere" in nft(netns, "list", "tables")
