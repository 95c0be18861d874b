"""Validators: only names, IP literals, CIDRs and ferm variables pass; ferm syntax never."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from typhapki.errors import ConfigError
from typhapki.inventory.hostnames import (
    MIN_PREFIX_V4,
    MIN_PREFIX_V6,
    merge_within_bounds,
    not_a_node,
    validate_cidr,
    validate_ferm_variable,
    validate_host,
    validate_ip,
    validate_port,
    validate_source_network,
)

FERM_SYNTAX = [";", "(", ")", "{", "}", "@", "$", "#", "'", '"', " ", "\t", "\n", "\r", "\\", ","]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("kubestage1001.eqiad.wmnet", "kubestage1001.eqiad.wmnet"),
        ("KubeStage1001.EQIAD.wmnet.", "kubestage1001.eqiad.wmnet"),
        ("a", "a"),
        ("x-1.example", "x-1.example"),
        ("1a.example", "1a.example"),
        ("10.64.0.1", "10.64.0.1"),
        ("2620:0:861:101:0:0:0:10", "2620:0:861:101::10"),
        ("::1", "::1"),
        ("a" * 63 + ".example", "a" * 63 + ".example"),
        (".".join(["a" * 63] * 3) + "." + "b" * 61, ".".join(["a" * 63] * 3) + "." + "b" * 61),
    ],
)
def test_valid_hosts_are_normalised(raw: str, expected: str) -> None:
    assert validate_host(raw) == expected


@pytest.mark.parametrize(
    "raw",
    [
        "",
        ".",
        "-a.example",
        "a-.example",
        "a..example",
        "a.example..",
        "a_b.example",
        "a" * 64 + ".example",
        ".".join(["a" * 63] * 4),  # 255 characters
        "10.0.0.256",
        "10.0.0",
        "300.1.1.1",
        "010.0.0.1",
        "fe80::1%eth0",
        "2001:db8::1::2",
        "h\u00e9te.example",
        "host.example\n",
        " host.example",
        "*.example",
        "host/24",
        None,
        42,
        True,
        ["a.example"],
        {"a": 1},
    ],
)
def test_invalid_hosts_are_refused(raw: object) -> None:
    with pytest.raises(ConfigError, match="is not a valid hostname or IP"):
        validate_host(raw, "f.yaml: k[0]")


@pytest.mark.parametrize("char", FERM_SYNTAX)
def test_no_ferm_syntax_passes_any_validator(char: str) -> None:
    for value in (f"a{char}b.example", f"host.example{char}", f"10.0.0.1{char}"):
        with pytest.raises(ConfigError):
            validate_host(value)
        with pytest.raises(ConfigError):
            validate_ip(value)
        with pytest.raises(ConfigError):
            validate_cidr(value)
    for value in (f"$A{char}B", f"$AB{char}", f"{char}$AB"):
        with pytest.raises(ConfigError):
            validate_ferm_variable(value)


def test_message_names_where_and_quotes_value_on_one_line() -> None:
    with pytest.raises(ConfigError) as info:
        validate_host(
            "bad host;\nnext", "hiera/x.yaml:7: kubernetes::clusters.main.foo.cluster_nodes[2]"
        )
    text = str(info.value)
    assert text.startswith("hiera/x.yaml:7: kubernetes::clusters.main.foo.cluster_nodes[2]: ")
    assert "'bad host;\\nnext' is not a valid hostname or IP" in text
    assert "\n" not in text


def test_long_values_are_cut_in_messages() -> None:
    with pytest.raises(ConfigError) as info:
        validate_host("x;" * 500)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("10.64.0.0/16", "10.64.0.0/16"),
        ("10.64.0.7", "10.64.0.7/32"),
        ("2620:0:861:0::/48", "2620:0:861::/48"),
        ("0.0.0.0/0", "0.0.0.0/0"),
    ],
)
def test_valid_cidrs(raw: str, expected: str) -> None:
    assert validate_cidr(raw) == expected


@pytest.mark.parametrize(
    "raw", ["10.64.0.1/16", "10.64.0.0/33", "10.64.0.0/", "host.example/24", "", 10, None]
)
def test_invalid_cidrs(raw: object) -> None:
    with pytest.raises(ConfigError, match="is not a valid CIDR network"):
        validate_cidr(raw, "where")


@pytest.mark.parametrize("raw", ["$DOMAIN_NETWORKS", "$_x", "$a1"])
def test_valid_ferm_variables(raw: str) -> None:
    assert validate_ferm_variable(raw) == raw


@pytest.mark.parametrize("raw", ["DOMAIN_NETWORKS", "$", "$1A", "$A-B", "$A\n", "&R_SERVICE", 5])
def test_invalid_ferm_variables(raw: object) -> None:
    with pytest.raises(ConfigError, match="is not a ferm variable name"):
        validate_ferm_variable(raw)


@pytest.mark.parametrize("raw", [0, 65536, -1, True, "5473", 5473.0])
def test_invalid_ports(raw: object) -> None:
    with pytest.raises(ConfigError, match="is not a TCP port"):
        validate_port(raw)


def test_valid_port() -> None:
    assert validate_port(5473) == 5473


# --- sources a rule may allow (issue 8, class 2) ------------------------------------------

_SPECIAL_V4 = ["0.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4"]
_SPECIAL_V6 = ["::/96", "::ffff:0:0/96", "fe80::/10", "fec0::/10", "ff00::/8"]


@st.composite
def networks(draw: st.DrawFn) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    v6 = draw(st.booleans())
    address = draw(st.ip_addresses(v=6 if v6 else 4))
    prefix = draw(st.integers(0, 128 if v6 else 32))
    return ipaddress.ip_network(f"{address}/{prefix}", strict=False)


@settings(max_examples=500, deadline=None)
@given(network=networks())
def test_source_networks_within_the_limits_and_clear_of_special_ranges(
    network: ipaddress.IPv4Network | ipaddress.IPv6Network,
) -> None:
    limit = MIN_PREFIX_V4 if network.version == 4 else MIN_PREFIX_V6
    specials = [
        ipaddress.ip_network(s) for s in (_SPECIAL_V4 if network.version == 4 else _SPECIAL_V6)
    ]
    expected_ok = network.prefixlen >= limit and not any(network.overlaps(s) for s in specials)
    try:
        got = validate_source_network(network.with_prefixlen, "networks[0]")
    except ConfigError as exc:
        assert not expected_ok, exc
        assert str(exc).startswith("networks[0]: ")
        return
    assert expected_ok, network
    assert got == network.with_prefixlen
    assert not_a_node(str(network.network_address)) is None
    assert not_a_node(str(network.broadcast_address)) is None


@pytest.mark.parametrize(
    ("address", "label"),
    [
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("127.0.0.53", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),
        ("fe80::1", "link-local"),
        ("224.0.0.251", "multicast"),
        ("ff02::1", "multicast"),
        ("255.255.255.255", "broadcast"),
        ("::ffff:10.64.0.1", "IPv4-mapped"),
        ("10.64.0.1", None),
        ("2620:0:861::1", None),
        ("fd00::1", None),
    ],
)
def test_not_a_node(address: str, label: str | None) -> None:
    assert not_a_node(address) == label


@st.composite
def near_networks(draw: st.DrawFn) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    """Networks within the limits that often touch across a /8 or /32 boundary (10/8
    and 11/8, fd00::/32 and fd00:1::/32), so that a plain collapse would widen them."""
    out: list[ipaddress.IPv4Network | ipaddress.IPv6Network] = []
    for _ in range(draw(st.integers(1, 12))):
        if draw(st.booleans()):
            prefix = draw(st.sampled_from([8, 8, 9, 16]) | st.integers(8, 32))
            top = draw(st.sampled_from([10, 11, 12, 13, 44, 45]))
            low = draw(st.integers(0, 2**24 - 1))
            out.append(ipaddress.ip_network(f"{ipaddress.IPv4Address(top << 24 | low)}/{prefix}",
                                            strict=False))  # fmt: skip
        else:
            prefix = draw(st.sampled_from([32, 32, 33, 48]) | st.integers(32, 128))
            top = 0xFD000000 + draw(st.integers(0, 5))
            low = draw(st.integers(0, 2**96 - 1))
            out.append(ipaddress.ip_network(f"{ipaddress.IPv6Address(top << 96 | low)}/{prefix}",
                                            strict=False))  # fmt: skip
    return out


@settings(max_examples=100, deadline=None)
@given(networks=near_networks())
@example(
    networks=[
        ipaddress.ip_network(n) for n in ("10.0.0.0/8", "11.0.0.0/8", "fd00::/32", "fd00:1::/32")
    ]
)
def test_merging_never_widens_past_the_limits(
    networks: list[ipaddress.IPv4Network | ipaddress.IPv6Network],
) -> None:
    """issue 30, class 5: merged within /8 and /32, the same addresses, no overlaps,
    never more networks than given."""
    merged = merge_within_bounds(networks)
    for network in merged:
        limit = MIN_PREFIX_V4 if network.version == 4 else MIN_PREFIX_V6
        assert network.prefixlen >= limit, network
        validate_source_network(network.with_prefixlen)
    for version in (4, 6):
        given_family = [n for n in networks if n.version == version]
        merged_family = [n for n in merged if n.version == version]
        assert list(ipaddress.collapse_addresses(merged_family)) == list(  # type: ignore[type-var]
            ipaddress.collapse_addresses(given_family)  # type: ignore[type-var]
        )
        assert merged_family == sorted(merged_family)
        assert not any(a.overlaps(b) for i, a in enumerate(merged_family)
                       for b in merged_family[i + 1:])  # fmt: skip
    assert len(merged) <= len(networks)
