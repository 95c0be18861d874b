"""The DNS gate against real servers: dnsmasq, and scripted failing/silent/slow servers."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.support.dns import Behaviour, Dnsmasq, ScriptedDns, dnsmasq_server, scripted_dns
from typhapki.errors import ConfigError, UsageError
from typhapki.firewall.dnsgate import Reason, nameservers_from, parse_nameserver, resolve_all

__all__ = ["dnsmasq_server", "scripted_dns"]  # fixtures used below

RECORDS = {
    "dual.example.test": ["10.250.0.2", "fd00:5473::2", "10.250.0.1"],
    "v4only.example.test": ["10.250.1.1"],
    "v6only.example.test": ["fd00:5473::9"],
    "shared.example.test": ["10.250.0.1"],
}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1", ("127.0.0.1", 53)),
        ("127.0.0.1:5353", ("127.0.0.1", 5353)),
        ("::1", ("::1", 53)),
        ("[::1]:5353", ("::1", 5353)),
        ("[fd00::1]", ("fd00::1", 53)),
    ],
)
def test_parse_nameserver(text: str, expected: tuple[str, int]) -> None:
    assert parse_nameserver(text) == expected


@pytest.mark.parametrize(
    "text", ["dns.example", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:99999", "[::1", "[::1]x", ""]
)
def test_parse_nameserver_refuses(text: str) -> None:
    with pytest.raises(UsageError, match="--nameserver"):
        parse_nameserver(text)


def test_resolves_a_and_aaaa_sorted_and_deduplicated(
    dnsmasq_server: Callable[..., Dnsmasq],
) -> None:
    dns = dnsmasq_server(RECORDS)
    result = resolve_all(
        [*RECORDS, "DUAL.example.test.", "10.250.9.9"], nameservers=[dns.nameserver]
    )
    assert result.ok, result.failures
    assert result.addresses["dual.example.test"] == ("10.250.0.1", "10.250.0.2", "fd00:5473::2")
    assert result.addresses["v4only.example.test"] == ("10.250.1.1",)
    assert result.addresses["v6only.example.test"] == ("fd00:5473::9",)
    assert result.addresses["10.250.9.9"] == ("10.250.9.9",)
    assert result.all_addresses() == (
        "10.250.0.1",
        "10.250.0.2",
        "10.250.1.1",
        "10.250.9.9",
        "fd00:5473::2",
        "fd00:5473::9",
    )


def test_nxdomain_is_reported_per_host(dnsmasq_server: Callable[..., Dnsmasq]) -> None:
    dns = dnsmasq_server(RECORDS)
    result = resolve_all(
        ["dual.example.test", "new-node.example.test", "gone.example.test"],
        nameservers=[dns.nameserver],
    )
    assert not result.ok
    assert set(result.addresses) == {"dual.example.test"}
    assert result.failure_lines() == [
        "gone.example.test: NXDOMAIN",
        "new-node.example.test: NXDOMAIN",
    ]


def test_dual_stack_needs_both_families(dnsmasq_server: Callable[..., Dnsmasq]) -> None:
    dns = dnsmasq_server(RECORDS)
    hosts = ["dual.example.test", "v4only.example.test", "v6only.example.test", "10.250.7.7"]
    single = resolve_all(hosts, nameservers=[dns.nameserver], require_ipv6=False)
    assert single.ok
    dual = resolve_all(hosts, nameservers=[dns.nameserver], require_ipv6=True)
    assert dual.failures["v4only.example.test"].reason is Reason.NO_AAAA
    assert dual.failures["v6only.example.test"].reason is Reason.NO_A
    # IP literals are taken as they are, dual-stack or not
    assert set(dual.addresses) == {"dual.example.test", "10.250.7.7"}


def test_ip_literals_never_touch_dns(scripted_dns: Callable[..., ScriptedDns]) -> None:
    server = scripted_dns(default=Behaviour.SILENT)
    result = resolve_all(
        ["10.0.0.1", "2001:db8::1"], nameservers=[server.nameserver], require_ipv6=True
    )
    assert result.ok
    assert server.queries == 0


def test_every_failure_reason(scripted_dns: Callable[..., ScriptedDns]) -> None:
    server = scripted_dns(
        {
            "sf.example.test": Behaviour.SERVFAIL,
            "rf.example.test": Behaviour.REFUSED,
            "to.example.test": Behaviour.SILENT,
            "nd.example.test": Behaviour.NODATA,
            "nx.example.test": Behaviour.NXDOMAIN,
            "ok.example.test": ["10.250.0.5"],
        }
    )
    result = resolve_all(
        [f"{x}.example.test" for x in ("sf", "rf", "to", "nd", "nx", "ok")],
        nameservers=[server.nameserver],
        timeout=1.0,  # generous: only the silent server may time out, even on a loaded machine
        retries=0,
    )
    reasons = {host: failure.reason for host, failure in result.failures.items()}
    assert reasons == {
        "sf.example.test": Reason.SERVFAIL,
        "rf.example.test": Reason.REFUSED,
        "to.example.test": Reason.TIMEOUT,
        "nd.example.test": Reason.NO_RECORDS,
        "nx.example.test": Reason.NXDOMAIN,
    }
    assert result.addresses == {"ok.example.test": ("10.250.0.5",)}
    assert "sf.example.test: SERVFAIL (A)" in result.failure_lines()
    assert "nd.example.test: no A/AAAA records" in result.failure_lines()


def test_timeouts_are_retried(scripted_dns: Callable[..., ScriptedDns]) -> None:
    server = scripted_dns(default=Behaviour.SILENT)
    result = resolve_all(
        ["quiet.example.test"], nameservers=[server.nameserver], timeout=0.1, retries=2
    )
    assert result.failures["quiet.example.test"].reason is Reason.TIMEOUT
    assert server.queries == 6  # A and AAAA, each asked 1 + 2 times


def test_retries_rotate_to_a_working_nameserver(
    scripted_dns: Callable[..., ScriptedDns], dnsmasq_server: Callable[..., Dnsmasq]
) -> None:
    broken = scripted_dns(default=Behaviour.SERVFAIL)
    dns = dnsmasq_server(RECORDS)
    servers = [broken.nameserver, dns.nameserver]
    result = resolve_all(list(RECORDS), nameservers=servers, retries=1)
    assert result.ok, result.failure_lines()
    assert broken.queries > 0


@pytest.mark.parametrize("failure", [Behaviour.SERVFAIL, Behaviour.REFUSED, Behaviour.SILENT])
def test_partial_answer_fails_the_host(
    failure: Behaviour, scripted_dns: Callable[..., ScriptedDns]
) -> None:
    # A answers, AAAA fails: the host must fail, not pass with its IPv4 address only.
    server = scripted_dns(
        {"half.example.test": ["10.250.0.7", "fd00::7"], "half.example.test AAAA": failure}
    )
    # A generous timeout: a loaded CI machine must not turn the A answer into a retry.
    result = resolve_all(
        ["half.example.test"], nameservers=[server.nameserver], timeout=1.0, retries=1
    )
    assert not result.addresses
    failed = result.failures["half.example.test"]
    assert failed.detail == "AAAA"
    assert (
        failed.reason
        is {
            Behaviour.SERVFAIL: Reason.SERVFAIL,
            Behaviour.REFUSED: Reason.REFUSED,
            Behaviour.SILENT: Reason.TIMEOUT,
        }[failure]
    )
    assert server.queries == 3  # A once, AAAA twice (one retry)


def test_answers_to_another_question_are_ignored(
    scripted_dns: Callable[..., ScriptedDns],
) -> None:
    server = scripted_dns(default=Behaviour.MISMATCH)
    result = resolve_all(
        ["victim.example.test"], nameservers=[server.nameserver], timeout=0.5, retries=0
    )
    assert result.failures["victim.example.test"].reason is Reason.TIMEOUT
    assert not result.addresses


def test_queries_in_flight_are_bounded(scripted_dns: Callable[..., ScriptedDns]) -> None:
    server = scripted_dns(default=Behaviour.SYNTHESIZE, delay=0.05)
    names = [f"n{i}.example.test" for i in range(40)]
    result = resolve_all(names, nameservers=[server.nameserver], concurrency=5)
    assert result.ok
    assert server.queries == 80
    assert 2 <= server.max_pending <= 5


def test_invalid_hosts_never_reach_dns(scripted_dns: Callable[..., ScriptedDns]) -> None:
    server = scripted_dns(default=Behaviour.SYNTHESIZE)
    with pytest.raises(ConfigError, match="is not a valid hostname"):
        resolve_all(["ok.example.test", "bad;name"], nameservers=[server.nameserver])
    assert server.queries == 0


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"concurrency": 0}, "--concurrency"),
        ({"timeout": 0}, "--timeout"),
        ({"retries": -1}, "retries"),
    ],
)
def test_bad_limits(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(UsageError, match=needle):
        resolve_all(["a.example.test"], nameservers=[("127.0.0.1", 9)], **kwargs)  # type: ignore[arg-type]


def test_truncated_answers_are_asked_again_over_tcp(
    dnsmasq_server: Callable[..., Dnsmasq],
) -> None:
    # 60 A records do not fit a 512-byte UDP answer: dnsmasq sets TC, the gate uses TCP.
    many = [f"10.250.7.{i}" for i in range(1, 61)]
    dns = dnsmasq_server({"big.example.test": many})
    result = resolve_all(["big.example.test"], nameservers=[dns.nameserver])
    assert result.ok, result.failure_lines()
    assert len(result.addresses["big.example.test"]) == 60  # UDP alone carries 29 of them


def test_nameservers_from_flags_then_environment() -> None:
    assert nameservers_from(["127.0.0.1:5353"], {}) == [("127.0.0.1", 5353)]
    env = {"TYPHAPKI_NAMESERVERS": "127.0.0.1:5353, ::1"}
    assert nameservers_from([], env) == [("127.0.0.1", 5353), ("::1", 53)]
    assert nameservers_from(["10.0.0.1"], env) == [("10.0.0.1", 53)]
    assert nameservers_from([], {}) is None
    with pytest.raises(UsageError, match=r"\$TYPHAPKI_NAMESERVERS"):
        nameservers_from([], {"TYPHAPKI_NAMESERVERS": "dns.example"})
