"""typhapki/firewall/mtls_probe.py against real servers: the Go Typha peer in its three
modes, openssl s_server with -Verify and -verify, a silent listener and a closed port."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.gopeers import GoPeers, go_peers
from tests.support.mtlspeers import (
    closed_port,
    go_typha,
    hanging_typha,
    openssl_typha,
    silent_tls13_typha,
    split_typha,
)
from typhapki.firewall.mtls_probe import _ServerFlight, probe_target, prove
from typhapki.firewall.mtls_proof import ENFORCED, NOT_ENFORCED, UNKNOWN
from typhapki.pki.settings import Identity

__all__ = ["go_peers"]

TYPHA = Identity("calico-typha", None)
TIMEOUT = 2.0

Server = Callable[[GoPeers, Path], AbstractContextManager[str]]


@contextmanager
def split_front(
    tls12: AbstractContextManager[str], tls13: AbstractContextManager[str]
) -> Iterator[str]:
    """One address: a TLS 1.3 ClientHello reaches `tls13`, any other `tls12`."""
    with tls12 as old, tls13 as new, split_typha(old, new) as address:
        yield address


SERVERS: dict[str, tuple[Server, str, str]] = {
    # name: (server, verdict, words of the one line)
    "go verify": (lambda p, o: go_typha(p, o, "verify"), ENFORCED, "enforces mTLS"),
    "go no-client-cert": (
        lambda p, o: go_typha(p, o, "no-client-cert"),
        NOT_ENFORCED,
        "accepted a TLS client without a certificate",
    ),
    "go plain": (lambda p, o: go_typha(p, o, "plain"), NOT_ENFORCED, "speaks plain TCP"),
    # TLS 1.3 only: the refusals arrive as alerts after the client's handshake, and this
    # node's Felix is accepted (a session ticket, then Typha's data) under TLS 1.3.
    "go verify, TLS 1.3 only": (
        lambda p, o: go_typha(p, o, "verify", TLS_MIN_VERSION="1.3"),
        ENFORCED,
        "enforces mTLS under TLS 1.3: refused no certificate (",
    ),
    # issue 30, class 6: accepting a certificate-less client under TLS 1.3 only is seen.
    "go no-client-cert, TLS 1.3 only": (
        lambda p, o: go_typha(p, o, "no-client-cert", TLS_MIN_VERSION="1.3"),
        NOT_ENFORCED,
        "accepted a TLS client without a certificate under TLS 1.3",
    ),
    "openssl -verify, TLS 1.3 only": (
        lambda p, o: openssl_typha(o, "-verify", "1", "-verify_return_error", "-tls1_3"),
        NOT_ENFORCED,
        "accepted a TLS client without a certificate under TLS 1.3",
    ),
    "openssl -Verify, TLS 1.3 only": (
        lambda p, o: openssl_typha(o, "-Verify", "1", "-verify_return_error", "-tls1_3"),
        ENFORCED,
        "(after the TLS 1.3 handshake)) and another CA",
    ),
    # The brief's own server: -Verify without -verify_return_error still refuses a client
    # without a certificate, but takes one from another CA.
    "openssl -tls1_3 -Verify 1": (
        lambda p, o: openssl_typha(o, "-tls1_3", "-Verify", "1"),
        NOT_ENFORCED,
        "accepted a client certificate from another CA",
    ),
    # TLS 1.3 only, refusing every client after the handshake: no proof, never a false one.
    "go verify, TLS 1.3 only, Felix refused": (
        lambda p, o: go_typha(p, o, "verify", TLS_MIN_VERSION="1.3", TYPHA_CLIENTCN="other"),
        UNKNOWN,
        "not proven to accept this node's Felix",
    ),
    # Enforced under TLS 1.2, nothing under TLS 1.3: the TLS 1.2 probes alone proved it.
    "TLS 1.2 enforced, TLS 1.3 not": (
        lambda p, o: split_front(
            openssl_typha(o, "-Verify", "1", "-verify_return_error", "-tls1_2"),
            openssl_typha(o, "-verify", "1", "-tls1_3"),
        ),
        NOT_ENFORCED,
        "accepted a TLS client without a certificate under TLS 1.3 (it sent a session ticket",
    ),
    "python ssl, TLS 1.3, silent": (
        lambda p, o: silent_tls13_typha(o),
        NOT_ENFORCED,
        "accepted a TLS client without a certificate under TLS 1.3 (it kept the connection",
    ),
    "openssl -Verify": (
        lambda p, o: openssl_typha(o, "-Verify", "1", "-verify_return_error"),
        ENFORCED,
        "enforces mTLS",
    ),
    "openssl -verify": (
        lambda p, o: openssl_typha(o, "-verify", "1", "-verify_return_error"),
        NOT_ENFORCED,
        "accepted a TLS client without a certificate",
    ),
    # -Verify without -verify_return_error asks for a certificate and takes any.
    "openssl -Verify, errors ignored": (
        lambda p, o: openssl_typha(o, "-Verify", "1"),
        NOT_ENFORCED,
        "accepted a client certificate from another CA",
    ),
}


@pytest.mark.parametrize("name", list(SERVERS))
def test_each_server_gets_its_verdict(go_peers: GoPeers, issued: Path, name: str) -> None:
    server, verdict, words = SERVERS[name]
    with server(go_peers, issued) as address:
        proof = prove(address, issued, TYPHA, TIMEOUT)
    assert proof.verdict == verdict, proof
    assert words in proof.line and address in proof.line


def test_felix_refused_is_no_proof(go_peers: GoPeers, issued: Path, tmp_path: Path) -> None:
    """Typha refuses strangers, and this node's Felix too (a set of another CA): it
    enforces something, but the node cannot show that it is the cluster's mTLS."""
    from tests.support.issuing import ensure_local
    from typhapki.pki.issuance import init_ca, load_issuer
    from typhapki.pki.settings import KeyType, PkiSettings, RoleName

    other = tmp_path / "other"
    init_ca(tmp_path / "ca2", KeyType.ECDSA_P256, 3650, None, force=False)
    ensure_local(other, load_issuer(tmp_path / "ca2"), PkiSettings(), list(RoleName))
    with go_typha(go_peers, issued, "verify") as address:
        proof = prove(address, other, TYPHA, TIMEOUT)
    assert proof.verdict == UNKNOWN and "this node's Felix" in proof.line, proof


@pytest.mark.parametrize("kind", ["hanging", "closed"])
def test_silence_is_unknown_and_bounded(issued: Path, kind: str) -> None:
    def target() -> Iterator[str]:
        if kind == "hanging":
            with hanging_typha() as address:
                yield address
        else:
            with closed_port() as port:
                yield f"127.0.0.1:{port}"

    for address in target():
        started = time.monotonic()
        proof = prove(address, issued, TYPHA, TIMEOUT)
        assert time.monotonic() - started < TIMEOUT + 1.5
    assert proof.verdict == UNKNOWN, proof
    assert ("no answer" if kind == "hanging" else "nothing listens") in proof.line


def test_the_local_typha_first_else_the_configured_one() -> None:
    with hanging_typha() as local, closed_port() as port:
        assert probe_target(local, ["10.0.0.1:5473"], TIMEOUT) == local
        closed = f"127.0.0.1:{port}"
        assert probe_target(closed, [local], TIMEOUT) == local
        assert probe_target(closed, [], TIMEOUT) is None


def test_the_stage_port_goes_to_addresses_that_name_none() -> None:
    """The TLS Typha's port (typhapki/typhaports.py) for a local or
    configured address without one; an address that names its port keeps it."""
    with hanging_typha() as listening, closed_port() as port:
        host, there = listening.rsplit(":", 1)
        assert probe_target(host, [], TIMEOUT, int(there)) == listening
        assert probe_target(f"127.0.0.1:{port}", ["typha.example"], TIMEOUT, 5474) == (
            "typha.example:5474"
        )
        assert probe_target(f"127.0.0.1:{port}", ["[2001:db8::1]"], TIMEOUT, 5474) == (
            "[2001:db8::1]:5474"
        )
        assert probe_target(f"127.0.0.1:{port}", ["[::1]:5473"], TIMEOUT, 5474) == "[::1]:5473"
        assert probe_target(listening, [], TIMEOUT, 5474) == listening


# A TLS 1.2 server flight as Go sends it: ServerHello, Certificate, ServerKeyExchange,
# CertificateRequest, ServerHelloDone, in handshake records.
def _record(kind: int, body: bytes) -> bytes:
    return bytes([kind, 3, 3]) + len(body).to_bytes(2, "big") + body


def _message(kind: int, size: int) -> bytes:
    return bytes([kind]) + size.to_bytes(3, "big") + bytes(size)


FLIGHT = [_message(2, 70), _message(11, 600), _message(12, 100), _message(13, 40), _message(14, 0)]


@settings(max_examples=100, deadline=None)
@given(
    per_record=st.integers(1, 5),
    cuts=st.lists(st.integers(1, 900), max_size=8),
)
def test_the_flight_is_read_however_it_is_cut(per_record: int, cuts: list[int]) -> None:
    """Records may hold several messages and TCP may cut anywhere: the parser sees the
    same messages, and that Typha asked for a certificate."""
    records = b"".join(
        _record(22, b"".join(FLIGHT[i : i + per_record])) for i in range(0, len(FLIGHT), per_record)
    )
    flight = _ServerFlight()
    start = 0
    for cut in sorted({c for c in cuts if c < len(records)}):
        flight.feed(records[start:cut])
        start = cut
    flight.feed(records[start:])
    assert flight.messages == [2, 11, 12, 13, 14]
    assert flight.spoke_tls and flight.asked_for_certificate and not flight.not_tls


@given(st.binary(min_size=1, max_size=64))
def test_bytes_that_are_not_tls_are_never_a_refusal(data: bytes) -> None:
    flight = _ServerFlight()
    flight.feed(data)
    assert not flight.asked_for_certificate
