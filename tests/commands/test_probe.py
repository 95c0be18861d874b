"""`typhapki probe`'s own options: --timeout and --address refused in one line.

A timeout the socket cannot take (nan, inf, 0, a negative one, 1e400) and a host the
resolver cannot take (over 253 characters, a label over 63, an IDN, an IPv6 zone that
is not an interface name, a port out of range) are refused before any connection,
naming the flag, or the node configuration's key when it came from there.
"""

from __future__ import annotations

import ipaddress
import math
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from typhapki.errors import UsageError
from typhapki.inventory.hostnames import parse_address, validate_host
from typhapki.options import PROBE_TIMEOUT

MIN_TIMEOUT, MAX_TIMEOUT = PROBE_TIMEOUT

SHARED = HealthCheck.function_scoped_fixture  # `issued` is only read
# Every kind of refused timeout, as typed: what click turns into a float first.
BAD_TIMEOUTS = st.one_of(
    st.sampled_from(["nan", "inf", "-inf", "0", "-1", "1e400", "-0.0", "301", "1e-9"]),
    st.floats(allow_nan=True, allow_infinity=True)
    .filter(lambda x: not MIN_TIMEOUT <= x <= MAX_TIMEOUT)
    .map(repr),
)


@settings(max_examples=20, deadline=None, suppress_health_check=[SHARED])
@given(text=BAD_TIMEOUTS)
def test_a_timeout_out_of_range_is_one_line(issued: Path, text: str) -> None:
    """From the flag: exit 2, the flag named, before any connection (nothing listens
    on port 1, which would be another error)."""
    result = run_cli("probe", "--address", "127.0.0.1:1", "--out", issued, f"--timeout={text}")
    # Text that is no number at all is refused by the one reader of number options
    # (typhapki/numbers.py option_number); a number out of the probe's range by its range.
    assert_one_line_error(result, 2, "(from --timeout)", "expected seconds from")


def test_a_timeout_from_the_node_configuration_names_its_key(issued: Path, tmp_path: Path) -> None:
    config = tmp_path / "typhapki.yaml"
    config.write_text("commands:\n  probe:\n    timeout: nan\n")
    config.chmod(0o644)
    result = run_cli("probe", "--address", "127.0.0.1:1", "--out", issued,
                     env={"TYPHAPKI_CONFIG": str(config)})  # fmt: skip
    assert_one_line_error(result, 2, f"(from {config}: commands.probe.timeout)")
    assert "--timeout" not in result.stderr  # nobody typed the flag
    config.write_text(f"defaults:\n  address: {'a' * 254}:5473\n")
    result = run_cli("probe", "--out", issued, env={"TYPHAPKI_CONFIG": str(config)})
    assert_one_line_error(result, 2, f"(from {config}: defaults.address)")
    assert "--address" not in result.stderr


def test_a_timeout_in_range_reaches_the_probe(issued: Path) -> None:
    """The edges are taken: the probe runs and fails on the closed port (exit 1)."""
    for value in (MIN_TIMEOUT, MAX_TIMEOUT):
        result = run_cli("probe", "--address", "127.0.0.1:1", "--out", issued,
                         f"--timeout={value}")  # fmt: skip
        assert_one_line_error(result, 1, "nothing listens on 127.0.0.1:1")
    assert not math.isnan(MIN_TIMEOUT) and 0 < MIN_TIMEOUT < MAX_TIMEOUT


LABEL = st.text("abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=70)
HOSTILE_HOSTS = st.one_of(
    st.lists(LABEL, min_size=1, max_size=6).map(".".join),  # labels up to 70
    st.integers(254, 400).map(lambda n: ("a" * 63 + ".") * (n // 64) + "b" * (n % 64 or 1)),
    st.text(min_size=1, max_size=20)
    .filter(lambda t: not t.isascii())
    .map(lambda t: f"{t}.example.org"),  # IDNs, and what is not a name at all
    st.tuples(st.sampled_from(["fe80::1", "::1", "2001:db8::5"]), st.text(max_size=20)).map(
        lambda p: f"[{p[0]}%{p[1]}]"
    ),  # IPv6 with zones, hostile ones among them
)
PORTS = st.one_of(st.none(), st.integers(-5, 70000).map(str), st.sampled_from(["", "05473"]))


@settings(max_examples=50, deadline=None)
@given(host=HOSTILE_HOSTS, port=PORTS)
def test_an_address_is_a_target_or_one_line(host: str, port: str | None) -> None:
    """Whatever the host and port, parse_address gives a host the resolver takes (a DNS
    name of at most 253 characters and labels of at most 63, an IPv4 literal, an IPv6
    literal with an interface's zone) and a port, or one line naming the option; never
    the resolver's own error. (No DNS here: the command's run is the next test's.)"""
    address = host if port is None else f"{host}:{port}"
    try:
        name, number = parse_address(address, "--address")
    except UsageError as exc:
        assert str(exc).startswith("--address: ") and "\n" not in str(exc)
        return
    assert 1 <= number <= 65535 and (port is None or int(port) == number)
    if host.startswith("["):
        ip, _, zone = name.partition("%")
        assert ipaddress.IPv6Address(ip) and len(zone) <= 15
    else:
        assert validate_host(name) == name.lower().removesuffix(".")
    name.encode("idna")  # what socket.getaddrinfo does first: no UnicodeError


def test_a_long_host_or_label_is_refused_before_the_resolver(issued: Path) -> None:
    """The issue's example: a host over 253 characters (the IDNA codec's traceback), and
    a label over 63: exit 2, the host named (cut)."""
    for host in ("a" * 254, "a" * 64 + ".example.org", "bücher.example", "[fe80::1%a/b]",
                 "[fe80::1%" + "e" * 16 + "]", "1.2.3", "a_b.example"):  # fmt: skip
        result = run_cli("probe", "--address", f"{host}:5473", "--out", issued)
        assert_one_line_error(result, 2, "--address")
    result = run_cli("probe", "--address", "[::1%lo]:1", "--out", issued)  # a zone: taken
    assert_one_line_error(result, 1, "TLS handshake as this node's Felix failed")


def test_the_monitoring_commands_name_their_own_flag(issued: Path) -> None:
    """`metrics --probe-address` takes the same addresses as `probe --address`, and a
    refusal names the flag typed, not `probe`'s."""
    for command in (("metrics",), ("check", "--nagios")):
        result = run_cli(*command, "--out", issued, "--probe-address", "a" * 254 + ":5473")
        said = result.stderr + result.stdout  # the Nagios line is on stdout
        assert result.returncode in (2, 3) and "(from --probe-address): 'aaaa" in said, said
        assert "--address" not in said.replace("--probe-address", "")
        assert "Traceback" not in said and len(said.splitlines()) == 1
