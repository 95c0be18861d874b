"""The DNS gate against hostile answers: records for other names, CNAME chains, addresses
that cannot be a node, literals in cluster_nodes, and a server that hangs up on TCP.

Answers are generated (hypothesis) and served by a real UDP server (tests/support/dns.py
AnswerDns); the gate parses them off the wire exactly as in production.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import dns.flags
import dns.message
import dns.rdatatype
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import against_servers, run_cli
from tests.support.dns import AnswerDns, answer
from typhapki.firewall.dnsgate import Reason, resolve_all
from typhapki.inventory.hostnames import not_a_node

QUERIED = ("n1.gate.test", "n2.gate.test")
CHAIN = ("c1.gate.test", "c2.gate.test", "c3.gate.test")  # CNAME targets
OTHERS = ("evil.gate.test", "n1.gate.test.evil.test", "x.n1.gate.test")  # never targets

# Records: (owner, type, data). Addresses come from anywhere, special ones included.
addresses_v4 = st.one_of(
    st.ip_addresses(v=4),
    st.sampled_from(["0.0.0.0", "127.0.0.1", "255.255.255.255", "224.0.0.1", "169.254.1.1"]),
)
addresses_v6 = st.one_of(
    st.ip_addresses(v=6),
    st.sampled_from(["::", "::1", "fe80::1", "ff02::1", "::ffff:10.1.2.3", "::10.1.2.3"]),
)
owners = st.sampled_from(QUERIED + CHAIN + OTHERS)
record = st.one_of(
    st.tuples(owners, st.just("A"), addresses_v4.map(str)),
    st.tuples(owners, st.just("AAAA"), addresses_v6.map(str)),
    st.tuples(owners, st.just("CNAME"), st.sampled_from(QUERIED + CHAIN)),
)
zones = st.dictionaries(
    st.tuples(st.sampled_from(QUERIED), st.sampled_from(["A", "AAAA"])),
    st.lists(record, max_size=6),
    max_size=4,
)

Zone = dict[tuple[str, str], list[tuple[str, str, str]]]


class Served:
    """The zone the module's server answers from; swapped per example."""

    zone: ClassVar[Zone] = {}

    @classmethod
    def handler(cls, query: dns.message.Message) -> dns.message.Message:
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True).lower()
        rdtype = dns.rdatatype.to_text(question.rdtype)
        records = cls.zone.get((name, rdtype), [])
        return answer(query, [(f"{o}.", t, d if t != "CNAME" else f"{d}.") for o, t, d in records])


@pytest.fixture(scope="module")
def server() -> Iterator[AnswerDns]:
    with AnswerDns(Served.handler) as dns_server:
        yield dns_server


def _chain(zone: Zone, name: str, rdtype: str) -> set[str]:
    """Names reachable from `name` through CNAME records of one answer (any order)."""
    records = zone.get((name, rdtype), [])
    reached = {name}
    changed = True
    while changed:
        changed = False
        for owner, kind, data in records:
            if kind == "CNAME" and owner in reached and data not in reached:
                reached.add(data)
                changed = True
    return reached


@against_servers(60)
@given(zone=zones, dual=st.booleans())
def test_only_the_queried_name_and_its_chain_count(
    server: AnswerDns, zone: Zone, dual: bool
) -> None:
    Served.zone = zone
    result = resolve_all(
        QUERIED, nameservers=[server.nameserver], require_ipv6=dual, timeout=2, retries=1
    )
    assert set(result.addresses) | set(result.failures) == set(QUERIED)
    for host in QUERIED:
        legit: set[str] = set()
        own: list[str] = []
        for rdtype in ("A", "AAAA"):
            reach = _chain(zone, host, rdtype)
            for owner, kind, data in zone.get((host, rdtype), []):
                if kind == rdtype and owner in reach:
                    legit.add(str(ipaddress.ip_address(data)))
                if kind == rdtype and owner == host:
                    own.append(str(ipaddress.ip_address(data)))
        if host in result.addresses:
            got = set(result.addresses[host])
            # Never a record of another name, never an address that cannot be a node.
            assert got <= legit, (host, got, legit)
            assert got, host
            assert all(not_a_node(a) is None for a in got), got
            # Records owned by the queried name itself are never dropped.
            assert set(own) <= got, (own, got)
        else:
            failure = result.failures[host]
            if failure.reason is Reason.NOT_A_NODE:
                bad = failure.detail.split(" ", 1)[0]
                assert bad in legit and not_a_node(bad) is not None, failure
        if any(not_a_node(a) for a in own):
            assert host in result.failures  # one bad record fails the whole host


@settings(max_examples=200, deadline=None)
@given(address=st.one_of(st.ip_addresses(v=4), st.ip_addresses(v=6)))
def test_literals_that_cannot_be_a_node_fail_the_gate(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    result = resolve_all([str(address)], nameservers=[("127.0.0.1", 9)])
    special = (
        address.is_unspecified
        or address.is_loopback
        or address.is_multicast
        or address.is_link_local
        or str(address) == "255.255.255.255"
        or (isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None)
    )
    if special:
        assert not result.ok
        assert result.failures[str(address)].reason is Reason.NOT_A_NODE
    if result.ok:
        assert result.all_addresses() == (str(address),)


HIERA = """\
kubernetes::clusters:
  main:
    gate:
      cluster_nodes: [n1.gate.test, n2.gate.test]
"""


@against_servers(8)
@given(zone=zones)
def test_ferm_never_writes_a_foreign_or_special_address(
    server: AnswerDns, zone: Zone, tmp_path_factory: pytest.TempPathFactory
) -> None:
    Served.zone = zone
    tmp = tmp_path_factory.mktemp("gate")
    (tmp / "hiera.yaml").write_text(HIERA)
    out = tmp / "rule"
    out.write_bytes(b"# old rule\n")
    result = run_cli(
        "ferm", "--hiera", tmp / "hiera.yaml", "--cluster", "gate",
        "--nameserver", server.arg, "--timeout", "2", "--output", out, timeout=60,
    )  # fmt: skip
    assert result.returncode in (0, 1), result.stderr
    assert "Traceback" not in result.stderr
    text = out.read_text()
    if result.returncode == 1:
        assert text == "# old rule\n"  # nothing written from a failed gate
        return
    sources = [ln.strip() for ln in text.splitlines() if ln.startswith("        ")]
    assert sources
    foreign = {
        str(ipaddress.ip_address(d))
        for records in zone.values()
        for o, t, d in records
        if t in ("A", "AAAA") and o in OTHERS
    }
    legit = {
        str(ipaddress.ip_address(d))
        for records in zone.values()
        for o, t, d in records
        if t in ("A", "AAAA") and o not in OTHERS
    }
    for source in sources:
        assert not_a_node(source) is None
        assert source in legit or source not in foreign


def _truncated(query: dns.message.Message) -> Any:
    response = dns.message.make_response(query)
    response.flags |= dns.flags.TC
    return response


def test_truncated_answer_then_closed_tcp_is_one_line_per_host(tmp_path: Path) -> None:
    """The server that made `ferm` print only `Aborted!`: TC over UDP, hang-up over TCP."""
    (tmp_path / "hiera.yaml").write_text(HIERA)
    with AnswerDns(_truncated, tcp="close") as server:
        result = run_cli(
            "ferm", "--hiera", tmp_path / "hiera.yaml", "--cluster", "gate",
            "--nameserver", server.arg, "--timeout", "2", timeout=60,
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "Aborted" not in result.stderr and "Traceback" not in result.stderr
    lines = result.stderr.splitlines()
    for host in QUERIED:
        (line,) = [ln for ln in lines if ln.startswith(f"typhapki: DNS gate: {host}: ")]
        assert "over TCP: connection closed" in line or "Connection reset" in line, line
    assert lines[-1].startswith("typhapki: DNS gate failed for cluster gate: 2 problem(s)")
