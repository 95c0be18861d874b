"""The kernel follows the file (issue 39), in a network namespace, for ferm and nft.

A rule file written by hand (docs/puppet.md's staging step) leaves the kernel with the
old rule. `typhapki ferm|nft --kernel`, the module's `unless` on the reload
(puppet/typhapki/manifests/ferm.pp, nftables.pp), must see the drift both ways, strict
to relaxed and relaxed to strict, and the module's reload command, which asks
`--kernel` again, must bring the kernel back in line. No DNS, no listener: the loaded
rules are what is judged here (tests/firewall/test_ferm_netns.py proves with TCP that
loaded rules admit what they say).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require, require_root, typhapki_cmd
from tests.firewall.test_ferm import FERM_DEFS
from typhapki.firewall import ferm as ferm_rules
from typhapki.firewall import nft as nft_rules
from typhapki.firewall.ferm import Sources
from typhapki.typhaports import TLS_PORTS

PORT = 5473
STRICT = Sources(addresses=("10.250.1.2", "10.250.2.2", "fd00:5473:1::2"), note="nodes")
RELAXED_NETWORKS = Sources(addresses=("10.250.0.0/16", "fd00:5473::/48"), note="networks")


@pytest.fixture
def netns() -> Iterator[str]:
    require_root()
    require("ip")
    name = f"tpk{os.getpid() % 100000}{time.monotonic_ns() % 1000}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=30)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def in_ns(ns: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", ns, *map(str, args)], capture_output=True, text=True, timeout=60
    )


def ferm_rule(mode: str, ports: tuple[int, ...] = (PORT,)) -> str:
    # Function style: the rule needs the fleet's &R_SERVICE (and, relaxed, its
    # $DOMAIN_NETWORKS) from ferm.conf, as on the fleet's nodes.
    sources = STRICT if mode == "strict" else Sources(variable="$DOMAIN_NETWORKS", note="var")
    return ferm_rules.render(cluster="netns", group="main", mode=mode, style="function",
                             ports=ports, sources=sources)  # fmt: skip


def test_ferm_reload_follows_a_rule_written_by_hand(netns: str, tmp_path: Path) -> None:
    require("ferm", "iptables", "ip6tables")
    conf, rule = tmp_path / "ferm.conf", tmp_path / "ferm.d" / "10_calico-typha"
    rule.parent.mkdir()
    conf.write_text(FERM_DEFS + "@include 'ferm.d/';\n")
    # What the module runs: its unless, and its reload command (reload_command && --kernel).
    kernel: list[str | Path] = [*typhapki_cmd(), "ferm", "--hiera", tmp_path / "unused",
                                "--cluster", "netns", "--output", rule, "--ferm-conf", conf,
                                "--kernel"]  # fmt: skip

    def reload() -> subprocess.CompletedProcess[str]:
        loaded = in_ns(netns, "ferm", conf)
        assert loaded.returncode == 0, loaded.stderr
        return in_ns(netns, *kernel)

    rule.write_text(ferm_rule("strict"))
    assert reload().returncode == 0
    # strict -> relaxed, relaxed -> strict, then retire: the plain port's rule, still
    # loaded beside an up to date TLS port's, is drift too.
    both = (PORT, TLS_PORTS.server)
    steps = [("relaxed", both), ("strict", both), ("strict", (TLS_PORTS.server,))]
    for mode, ports in steps:  # by hand, as docs/puppet.md's staging step does
        rule.write_text(ferm_rule(mode, ports))
        stale = in_ns(netns, *kernel)
        assert stale.returncode == 1, (mode, ports, stale.stdout, stale.stderr)
        assert ": drift: " in stale.stdout
        fixed = reload()
        assert fixed.returncode == 0 and ": in_sync: " in fixed.stdout, (mode, fixed.stdout)
    # The relaxed rule's expansion is in the kernel: ferm's variable, not a guess.
    saved = in_ns(netns, "iptables-legacy-save", "-t", "filter").stdout
    assert "--dport 5473" not in saved  # the plain port closed at the last step


def test_ferm_kernel_is_unknown_without_ferm_conf(netns: str, tmp_path: Path) -> None:
    """A ferm.conf ferm cannot read is no answer: exit 1, so the module reloads (and the
    reload's own failure is what the run reports)."""
    require("ferm")
    rule = tmp_path / "rule"
    rule.write_text(ferm_rule("strict"))
    missing = tmp_path / "missing.conf"
    proc = in_ns(netns, *typhapki_cmd(), "ferm", "--hiera", tmp_path, "--cluster", "netns",
                 "--output", rule, "--ferm-conf", missing, "--kernel")  # fmt: skip
    assert proc.returncode == 1 and ": unknown: " in proc.stdout, proc.stdout + proc.stderr


FACT = """
import json, sys
from pathlib import Path
from typhapki.puppet.facts import kernel_fact
print(json.dumps(kernel_fact(Path(sys.argv[1]))))
"""


def test_nft_refresh_follows_sets_written_by_hand(netns: str, tmp_path: Path) -> None:
    require("nft")
    fragment, update = tmp_path / "calico-typha.nft", tmp_path / "sets.nft"
    ruleset = tmp_path / "nftables.conf"
    ruleset.write_text(
        "flush ruleset\ntable inet filter {\n"
        "\tchain input { type filter hook input priority 0; policy drop; }\n"
        f'\tinclude "{fragment}"\n}}\n'
    )
    kernel: list[str | Path] = [*typhapki_cmd(), "nft", "--hiera", tmp_path / "unused",
                                "--cluster", "netns", "--output", fragment, "--kernel"]  # fmt: skip

    def render(sources: Sources, ports: tuple[int, ...], sets_only: bool = False) -> str:
        how = nft_rules.render_sets if sets_only else nft_rules.render
        return how(cluster="netns", group="main", mode="strict", ports=ports, sources=sources)

    def fact() -> str:
        proc = in_ns(netns, sys.executable, "-c", FACT, fragment)
        assert proc.returncode == 0, proc.stderr
        return str(json.loads(proc.stdout)["kernel"])

    fragment.write_text(render(STRICT, (PORT,)))
    assert in_ns(netns, *kernel).returncode == 0  # no table inet filter: not loaded
    assert fact() == "not_loaded"
    loaded = in_ns(netns, "nft", "-f", ruleset)
    assert loaded.returncode == 0, loaded.stderr
    assert in_ns(netns, *kernel).returncode == 0
    steps = [(RELAXED_NETWORKS, (PORT,)), (STRICT, (PORT, TLS_PORTS.server))]
    for index, (sources, ports) in enumerate(steps):
        # The file by hand; then the module's refresh: nft -f && --kernel.
        fragment.write_text(render(sources, ports))
        stale = in_ns(netns, *kernel)
        assert stale.returncode == 1 and ": drift: " in stale.stdout, stale.stdout
        assert index or fact() == "drift"
        update.write_text(render(sources, ports, sets_only=True))
        applied = in_ns(netns, "nft", "-f", update)
        assert applied.returncode == 0, applied.stderr
        fixed = in_ns(netns, *kernel)
        assert fixed.returncode == 0 and ": in_sync: " in fixed.stdout, fixed.stdout
    assert fact() == "in_sync"
