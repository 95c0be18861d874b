"""nftables rendering, proved by real nft: the fragment loads inside a fleet-like ruleset
in a network namespace of our own, and the kernel's sets hold exactly the sources."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import require, require_root
from typhapki.errors import ConfigError
from typhapki.firewall.ferm import Sources
from typhapki.firewall.nft import SET_PORTS, SET_V4, SET_V6, render, render_sets, split_sources

# The fleet's ruleset (Debian's /etc/nftables.conf shape): typhapki's fragment is
# included in its table, after its input chain whose policy drops (IPv6 neighbour
# discovery allowed, as every IPv6 host's ruleset must).
FLEET_RULESET = """\
flush ruleset
table inet filter {{
    chain input {{
        type filter hook input priority filter; policy drop;
        ct state established,related accept
        iif lo accept
        icmpv6 type {{ nd-neighbor-solicit, nd-neighbor-advert }} accept
    }}
    include "{fragment}"
}}
"""

_NetworkT = ipaddress.IPv4Network | ipaddress.IPv6Network


def fleet_ruleset(fragment: Path) -> str:
    return FLEET_RULESET.format(fragment=fragment)


def nft(namespace: str, *args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ip", "netns", "exec", namespace, "nft", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def netns() -> Iterator[str]:
    """An empty network namespace of our own, for nft to load rulesets into."""
    require_root()
    require("ip", "nft")
    name = f"tpnft{os.getpid() % 100000}{time.monotonic_ns() % 1000}"
    subprocess.run(["ip", "netns", "add", name], check=True, capture_output=True, timeout=30)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def kernel_set(namespace: str, name: str) -> list[_NetworkT]:
    """The elements of `name` as the kernel holds them (nft -j list set)."""
    proc = nft(namespace, "-j", "list", "set", "inet", "filter", name)
    assert proc.returncode == 0, proc.stderr
    found: list[_NetworkT] = []
    for item in json.loads(proc.stdout)["nftables"]:
        for elem in item.get("set", {}).get("elem", []):
            if isinstance(elem, str):
                found.append(ipaddress.ip_network(elem))
            elif "prefix" in elem:
                found.append(
                    ipaddress.ip_network(f"{elem['prefix']['addr']}/{elem['prefix']['len']}")
                )
            else:  # a range the kernel shows as such
                first, last = map(ipaddress.ip_address, elem["range"])
                found.extend(ipaddress.summarize_address_range(first, last))
    return found


def kernel_ports(namespace: str) -> list[int]:
    """The Typha ports the kernel's port set holds."""
    proc = nft(namespace, "-j", "list", "set", "inet", "filter", SET_PORTS)
    assert proc.returncode == 0, proc.stderr
    items = json.loads(proc.stdout)["nftables"]
    return sorted(int(e) for item in items for e in item.get("set", {}).get("elem", []))


def covered(networks: list[_NetworkT], by: list[_NetworkT]) -> bool:
    return all(any(n.version == b.version and n.subnet_of(b) for b in by) for n in networks)  # type: ignore[arg-type]


@st.composite
def sources(draw: st.DrawFn) -> list[str]:
    """Addresses and networks of both families within /8 and /32, overlapping at times,
    and often adjacent across a /8 or /32 boundary (10/8 and 11/8, fd00::/32 and
    fd00:1::/32), which a plain collapse would merge into a wider network."""
    out = []
    address: ipaddress.IPv4Address | ipaddress.IPv6Address
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            prefix = draw(st.sampled_from([8, 8, 9]) | st.integers(8, 32))
            top = draw(st.sampled_from([10, 11, 12, 13]))
            address = ipaddress.IPv4Address((top << 24) | draw(st.integers(0, 2**24 - 1)))
        else:
            prefix = draw(st.sampled_from([32, 32, 33]) | st.integers(32, 128))
            top = 0xFD000000 + draw(st.integers(0, 3))
            address = ipaddress.IPv6Address((top << 96) | draw(st.integers(0, 2**96 - 1)))
        out.append(ipaddress.ip_network(f"{address}/{prefix}", strict=False).with_prefixlen)
    return out


def within_limits(networks: list[_NetworkT]) -> bool:
    return all(n.prefixlen >= (8 if n.version == 4 else 32) for n in networks)


ADJACENT = ["10.0.0.0/8", "11.0.0.0/8", "12.1.0.0/16", "fd00::/32", "fd00:1::/32"]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    networks=sources(),
    ports=st.lists(st.integers(1, 65535), min_size=1, max_size=2, unique=True),
)
@example(networks=ADJACENT, ports=[5473])
@example(networks=ADJACENT, ports=[5473, 5474])
def test_fragment_loads_and_the_kernel_sets_hold_exactly_the_sources(
    netns: str, tmp_path: Path, networks: list[str], ports: list[int]
) -> None:
    fragment = tmp_path / "typha.nft"
    fragment.write_text(
        render(
            cluster="lab", group="g", mode="relaxed", ports=ports, sources=Sources(tuple(networks))
        )
    )
    ruleset = tmp_path / "nftables.conf"
    ruleset.write_text(fleet_ruleset(fragment))
    checked = nft(netns, "-c", "-f", ruleset)
    assert checked.returncode == 0, checked.stderr
    loaded = nft(netns, "-f", ruleset)
    assert loaded.returncode == 0, loaded.stderr
    wanted = [ipaddress.ip_network(n) for n in networks]
    held = kernel_set(netns, SET_V4) + kernel_set(netns, SET_V6)
    assert covered(wanted, held) and covered(held, wanted)
    assert within_limits(held), held  # issue 30: never merged past /8 or /32
    listed = nft(netns, "list", "chain", "inet", "filter", "input").stdout
    assert f"ip saddr @{SET_V4} tcp dport @{SET_PORTS} accept" in listed
    assert f"ip6 saddr @{SET_V6} tcp dport @{SET_PORTS} accept" in listed
    assert kernel_ports(netns) == sorted(ports)
    assert "policy drop" in listed  # the fleet's chain, not a chain of ours

    # The set update alone, applied over the loaded ruleset, gives the same sets.
    sets = tmp_path / "sets.nft"
    sets.write_text(
        render_sets(
            cluster="lab", group="g", mode="relaxed", ports=(5474,), sources=Sources(("10.9.9.9",))
        )
    )
    assert nft(netns, "-f", sets).returncode == 0
    assert kernel_set(netns, SET_V4) == [ipaddress.ip_network("10.9.9.9/32")]
    assert kernel_set(netns, SET_V6) == []
    assert kernel_ports(netns) == [5474]
    sets.write_text(
        render_sets(
            cluster="lab", group="g", mode="relaxed", ports=ports, sources=Sources(tuple(networks))
        )
    )
    applied = nft(netns, "-f", sets)
    assert applied.returncode == 0, applied.stderr
    held = kernel_set(netns, SET_V4) + kernel_set(netns, SET_V6)
    assert covered(wanted, held) and covered(held, wanted)
    assert within_limits(held), held
    assert kernel_ports(netns) == sorted(ports)


@given(networks=sources())
@example(networks=ADJACENT)
def test_split_merges_overlaps_and_keeps_families_apart(networks: list[str]) -> None:
    v4, v6 = split_sources(Sources(tuple(networks)))
    for family, elements in ((4, v4), (6, v6)):
        nets = [ipaddress.ip_network(e) for e in elements]
        assert within_limits(nets), nets  # merged, but never into a /7 or a /31
        assert all(n.version == family for n in nets)
        assert not any(a.overlaps(b) for i, a in enumerate(nets) for b in nets[i + 1 :])
        assert nets == sorted(nets)


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        (Sources(variable="$DOMAIN_NETWORKS"), "ferm variable"),
        (Sources(("0.0.0.0/0",)), "0.0.0.0/0"),
        (Sources(("10.0.0.1; flush ruleset",)), "flush ruleset"),
        (Sources(("127.0.0.1",)), "loopback"),
        (Sources(()), "needs source addresses"),
    ],
)
def test_refuses_what_is_not_a_validated_source(sources: Sources, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        render(cluster="lab", group="g", mode="strict", ports=(5473,), sources=sources)
    with pytest.raises(ConfigError, match=message):
        render_sets(cluster="lab", group="g", mode="strict", ports=(5473,), sources=sources)


@pytest.mark.parametrize(("cluster", "group"), [("lab\n}", "g"), ("lab", "g # x"), ("", "g")])
def test_refuses_names_outside_the_alphabet(cluster: str, group: str) -> None:
    with pytest.raises(ConfigError, match="not a valid"):
        render(
            cluster=cluster,
            group=group,
            mode="strict",
            ports=(5473,),
            sources=Sources(("10.0.0.1",)),
        )
