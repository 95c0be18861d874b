"""Validators: only names, IP literals, CIDRs and ferm variables pass; ferm syntax never."""

from __future__ import annotations

import pytest

from typhapki.errors import ConfigError
from typhapki.firewall.hostnames import (
    validate_cidr,
    validate_ferm_variable,
    validate_host,
    validate_ip,
    validate_port,
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
