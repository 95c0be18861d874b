"""The DNS gate: every cluster node must resolve before any ferm rule is written.

ferm's ``@resolve`` and a Puppet-side srange both drop a name that does not resolve,
silently (docs/ferm.md). Here each host is resolved up front, A and AAAA,
concurrently (dnspython asyncio, a semaphore bounds the queries in flight), with a
per-query timeout and retries rotating over the nameservers; and each failing host is
reported with its reason. The caller emits nothing unless `GateResult.ok`.

Rules: an IP literal passes as it is, without DNS. A name passes when it has A and/or
AAAA records; with ``require_ipv6`` (a dual-stack cluster) it needs both. Any query
that ends in SERVFAIL, REFUSED or a timeout fails the host even when the other family
answered: a partial answer would silently drop addresses from the rule. Names are
queried as given (absolute, no search domains): cluster_nodes hold FQDNs.

Only answer records owned by the queried name, or by a name of its CNAME chain, count;
records for any other name are ignored. An address that cannot be a node's source
(loopback, unspecified, multicast, broadcast, link-local, IPv4-mapped: see
hostnames.not_a_node) fails its host, as a literal or as an answer: one bad record
fails the whole host rather than being dropped from it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import secrets
import zlib
from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any, cast

from typhapki.errors import UsageError
from typhapki.inventory.hostnames import not_a_node, parse_ip, validate_host
from typhapki.numbers import whole_number
from typhapki.provenance import OptionError
from typhapki.record import field, record

# Where --nameserver is not given: lets a pre-commit hook point at a resolver.
NAMESERVERS_ENV = "TYPHAPKI_NAMESERVERS"

DEFAULT_PORT = 53
DEFAULT_CONCURRENCY = 200
DEFAULT_TIMEOUT = 2.0
DEFAULT_RETRIES = 2

Nameserver = tuple[str, int]


class Reason(StrEnum):
    """Why a host failed the gate."""

    NXDOMAIN = "NXDOMAIN"
    NO_RECORDS = "no A/AAAA records"
    NO_AAAA = "no AAAA record (cluster is dual-stack)"
    NO_A = "no A record (cluster is dual-stack)"
    SERVFAIL = "SERVFAIL"
    REFUSED = "REFUSED"
    TIMEOUT = "timeout"
    ERROR = "DNS error"
    NOT_A_NODE = "not a node address"


@record(frozen=True)
class HostFailure:
    """A cluster node that failed the DNS gate, and why."""

    host: str
    reason: Reason
    detail: str = ""  # e.g. which record type, the rcode name of an unusual answer

    def line(self) -> str:
        detail = f" ({self.detail})" if self.detail else ""
        return f"{self.host}: {self.reason.value}{detail}"


@record(frozen=True)
class GateResult:
    """Per host: its addresses (sorted, deduplicated) or why it failed."""

    addresses: dict[str, tuple[str, ...]] = field(default_factory=dict)
    failures: dict[str, HostFailure] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failures

    def all_addresses(self) -> tuple[str, ...]:
        """Every resolved address once, IPv4 first, then IPv6, each in numeric order."""
        seen = {a for addrs in self.addresses.values() for a in addrs}
        return tuple(sorted(seen, key=_address_key))

    def failure_lines(self) -> list[str]:
        return [self.failures[h].line() for h in sorted(self.failures)]


def _address_key(address: str) -> tuple[int, int]:
    ip = ipaddress.ip_address(address)
    return (ip.version, int(ip))


_NOT_A_NAMESERVER = "expected IP, IP:PORT or [IPv6]:PORT"


def parse_nameserver(value: str) -> Nameserver:
    """``IP``, ``IP:PORT``, ``IPv6`` or ``[IPv6]:PORT`` -> (ip, port)."""
    text = value.strip()
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (end + 1 < len(text) and text[end + 1] != ":"):
            raise OptionError("nameserver", value, _NOT_A_NAMESERVER)
        host, port_text = text[1:end], text[end + 2 :]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    address = parse_ip(host)
    if address is None:
        raise OptionError("nameserver", value, _NOT_A_NAMESERVER)
    port = DEFAULT_PORT
    if port_text or text.endswith(":"):
        try:
            port = whole_number(port_text, low=1, high=65535, error=UsageError, what="port")
        except UsageError as exc:
            raise OptionError("nameserver", value, str(exc)) from None
    return (str(address), port)


def system_nameservers() -> list[Nameserver]:
    """The nameservers of /etc/resolv.conf."""
    import dns.resolver

    try:
        resolver = dns.resolver.Resolver(configure=True)
    except (dns.resolver.NoResolverConfiguration, OSError):
        raise UsageError("no nameserver in /etc/resolv.conf: give --nameserver IP[:PORT]") from None
    servers = [(str(ns), DEFAULT_PORT) for ns in resolver.nameservers if parse_ip(str(ns))]
    if not servers:
        raise UsageError("no nameserver in /etc/resolv.conf: give --nameserver IP[:PORT]")
    return servers


@record(frozen=True)
class _Answer:
    """The addresses one query returned, or its failure."""

    records: tuple[str, ...] = ()
    reason: Reason | None = None  # None: NOERROR (records may be empty: no data)
    detail: str = ""


_QTYPES = {"A": 1, "AAAA": 28}
_CNAME = 5
_MAX_CNAME_CHAIN = 16


def _question_wire(host: str, rdtype_text: str) -> bytes:
    """The question section for `host` (a validated name): labels, QTYPE, QCLASS IN."""
    labels = b"".join(len(label).to_bytes(1, "big") + label for label in host.encode().split(b"."))
    return labels + b"\x00" + _QTYPES[rdtype_text].to_bytes(2, "big") + b"\x00\x01"


class _UdpClient(asyncio.DatagramProtocol):
    """One UDP socket shared by many queries in flight, answers matched to queries.

    dnspython's asyncquery.udp opens a socket per query and builds each message as an
    object; at thousands of queries that set-up dominates. Here a few long-lived
    sockets (random source ports) carry every query, built directly on the wire with a
    random ID; an answer counts only when its ID matches a pending query, it is a
    response, and it echoes exactly our question. dnspython then parses the answer.
    """

    def __init__(self) -> None:
        self.transport: asyncio.DatagramTransport | None = None
        self.pending: dict[int, tuple[bytes, asyncio.Future[Any]]] = {}

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        import dns.message

        if len(data) < 12:
            return
        entry = self.pending.get(int.from_bytes(data[:2], "big"))
        if entry is None:
            return
        question, future = entry
        # QR set, QDCOUNT 1, and the question exactly as asked (case-insensitive).
        if not data[2] & 0x80 or data[4:6] != b"\x00\x01":
            return
        if data[12 : 12 + len(question)].lower() != question:
            return
        try:
            response = dns.message.from_wire(data)
        except Exception:  # garbage on the wire is not an answer
            return
        if not future.done():
            future.set_result(response)

    def error_received(self, exc: Exception) -> None:
        # An ICMP error (port unreachable) names no query: the socket is shared by
        # queries to every nameserver, so the one it concerns simply times out.
        pass

    def connection_lost(self, exc: Exception | None) -> None:
        for _, future in list(self.pending.values()):
            if not future.done():
                future.set_exception(exc or ConnectionError("socket closed"))

    async def exchange(self, question: bytes, where: Nameserver, timeout: float) -> Any:
        """Send one query (recursion desired), wait for its answer (raises TimeoutError)."""
        loop = asyncio.get_running_loop()
        query_id = secrets.randbelow(65536)
        while query_id in self.pending:
            query_id = secrets.randbelow(65536)
        future: asyncio.Future[Any] = loop.create_future()
        self.pending[query_id] = (question, future)
        # call_later rather than wait_for: no extra task per query (thousands in flight).
        expiry = loop.call_later(timeout, _expire, future)
        try:
            assert self.transport is not None
            header = query_id.to_bytes(2, "big") + b"\x01\x00\x00\x01\x00\x00\x00\x00\x00\x00"
            self.transport.sendto(header + question, where)
            return await future
        finally:
            expiry.cancel()
            self.pending.pop(query_id, None)


def _expire(future: asyncio.Future[Any]) -> None:
    if not future.done():
        future.set_exception(TimeoutError())


class _Querier:
    SOCKETS_PER_FAMILY = 8

    def __init__(
        self, nameservers: list[Nameserver], concurrency: int, timeout: float, retries: int
    ) -> None:
        self.nameservers = nameservers
        self.semaphore = asyncio.Semaphore(concurrency)
        self.timeout = timeout
        self.retries = retries
        self.clients: dict[int, list[_UdpClient]] = {}
        self._next = 0

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        for family in sorted({ipaddress.ip_address(ns[0]).version for ns in self.nameservers}):
            local = "0.0.0.0" if family == 4 else "::"
            clients: list[_UdpClient] = []
            self.clients[family] = clients  # filled in place: close() sees partial sets
            for _ in range(self.SOCKETS_PER_FAMILY):
                try:
                    _, protocol = await loop.create_datagram_endpoint(
                        _UdpClient, local_addr=(local, 0)
                    )
                except OSError as exc:
                    self.close()
                    raise UsageError(
                        f"--nameserver: cannot open an IPv{family} socket: {exc.strerror or exc}"
                    ) from None
                clients.append(protocol)

    def close(self) -> None:
        for clients in self.clients.values():
            for client in clients:
                if client.transport is not None:
                    client.transport.close()

    def _client(self, where: str) -> _UdpClient:
        clients = self.clients[ipaddress.ip_address(where).version]
        self._next += 1
        return clients[self._next % len(clients)]

    async def query(self, host: str, rdtype_text: str) -> _Answer:
        """One record type of one name: retries rotate over the nameservers."""
        question = _question_wire(host, rdtype_text)
        answer = _Answer(reason=Reason.TIMEOUT, detail=rdtype_text)
        # Start each name at a different server, so one slow server does not get all first tries.
        start = zlib.crc32(host.encode()) % len(self.nameservers)
        for attempt in range(self.retries + 1):
            where, port = self.nameservers[(start + attempt) % len(self.nameservers)]
            async with self.semaphore:
                answer = await self._ask(host, question, where, port, rdtype_text)
            if answer.reason not in (Reason.TIMEOUT, Reason.SERVFAIL, Reason.REFUSED):
                return answer  # a definite answer: records, no data or NXDOMAIN
        return answer

    async def _ask(
        self, host: str, question: bytes, where: str, port: int, rdtype_text: str
    ) -> _Answer:
        import dns.asyncquery
        import dns.exception
        import dns.flags
        import dns.message
        import dns.rcode

        try:
            response = await self._client(where).exchange(question, (where, port), self.timeout)
        except (TimeoutError, dns.exception.Timeout):
            return _Answer(reason=Reason.TIMEOUT, detail=rdtype_text)
        except (dns.exception.DNSException, OSError) as exc:
            return _Answer(reason=Reason.ERROR, detail=f"{rdtype_text}: {exc}")
        if response.flags & dns.flags.TC:  # too big for UDP: ask again over TCP
            request = dns.message.make_query(host, rdtype_text)
            try:
                response = await dns.asyncquery.tcp(request, where, timeout=self.timeout, port=port)
            except (TimeoutError, dns.exception.Timeout):
                return _Answer(reason=Reason.TIMEOUT, detail=f"{rdtype_text} over TCP")
            except Exception as exc:
                # A server that closes the connection makes dnspython raise EOFError,
                # which click would print as a bare "Aborted!": name the host instead.
                closed = isinstance(exc, EOFError)
                text = "connection closed" if closed else str(exc) or type(exc).__name__
                return _Answer(reason=Reason.ERROR, detail=f"{rdtype_text} over TCP: {text}")
        rcode = response.rcode()
        if rcode == dns.rcode.NXDOMAIN:
            return _Answer(reason=Reason.NXDOMAIN)
        if rcode == dns.rcode.SERVFAIL:
            return _Answer(reason=Reason.SERVFAIL, detail=rdtype_text)
        if rcode == dns.rcode.REFUSED:
            return _Answer(reason=Reason.REFUSED, detail=rdtype_text)
        if rcode != dns.rcode.NOERROR:
            return _Answer(reason=Reason.ERROR, detail=f"{rdtype_text}: {dns.rcode.to_text(rcode)}")
        return _Answer(records=_owned_records(response, host, _QTYPES[rdtype_text]))


def _owned_records(response: Any, host: str, rdtype: int) -> tuple[str, ...]:
    """The addresses of type `rdtype` owned by `host` or by a name of its CNAME chain.

    The chain is followed from the queried name, one CNAME per name, at most
    _MAX_CNAME_CHAIN links; a record for any other name is ignored, whatever the
    server (or a spoofer) put in the answer section.
    """
    import dns.name
    import dns.rdataclass

    owner = dns.name.from_text(host)
    chain = {owner}
    cnames = {
        rrset.name: rrset[0].target
        for rrset in response.answer
        if rrset.rdtype == _CNAME and rrset.rdclass == dns.rdataclass.IN and len(rrset) == 1
    }
    while owner in cnames and len(chain) <= _MAX_CNAME_CHAIN:
        owner = cnames[owner]
        if owner in chain:
            break  # a CNAME loop: nothing beyond it
        chain.add(owner)
    records = {
        str(ipaddress.ip_address(rdata.address))  # canonical text, as literals have
        for rrset in response.answer
        if rrset.rdtype == rdtype and rrset.rdclass == dns.rdataclass.IN and rrset.name in chain
        for rdata in rrset
    }
    return tuple(sorted(records, key=_address_key))


def _not_a_node(records: Iterable[str]) -> _Answer | None:
    """A failure naming the first address that cannot be a cluster node, else None."""
    for address in records:
        label = not_a_node(address)
        if label is not None:
            return _Answer(reason=Reason.NOT_A_NODE, detail=f"{address} is {label}")
    return None


async def _resolve_host(querier: _Querier, host: str, require_ipv6: bool) -> _Answer:
    a, aaaa = await asyncio.gather(querier.query(host, "A"), querier.query(host, "AAAA"))
    # Errors first: a partial answer must never pass as a complete one.
    for answer in (a, aaaa):
        if answer.reason is not None and answer.reason != Reason.NXDOMAIN:
            return answer
    if Reason.NXDOMAIN in (a.reason, aaaa.reason):
        return _Answer(reason=Reason.NXDOMAIN)
    if not a.records and not aaaa.records:
        return _Answer(reason=Reason.NO_RECORDS)
    if require_ipv6 and not aaaa.records:
        return _Answer(reason=Reason.NO_AAAA)
    if require_ipv6 and not a.records:
        return _Answer(reason=Reason.NO_A)
    return _not_a_node(a.records + aaaa.records) or _Answer(records=a.records + aaaa.records)


async def resolve_all_async(
    hosts: Iterable[str],
    *,
    nameservers: list[Nameserver] | None = None,
    require_ipv6: bool = False,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
) -> GateResult:
    """Resolve every host concurrently; see the module docstring for the rules."""
    if concurrency < 1:
        raise OptionError("concurrency", concurrency, "must be at least 1")
    if not timeout > 0:
        raise OptionError("timeout", timeout, "must be positive")
    if retries < 0:
        raise UsageError(f"retries: must be 0 or more, got {retries}")
    # Defence in depth: whatever the caller passes, only valid names reach DNS and rules.
    unique = sorted({validate_host(h, "DNS gate") for h in hosts})
    addresses: dict[str, tuple[str, ...]] = {}
    names: list[str] = []
    failures: dict[str, HostFailure] = {}
    for host in unique:
        if parse_ip(host) is None:
            names.append(host)
        elif (bad := _not_a_node([host])) is not None:
            failures[host] = HostFailure(host, Reason.NOT_A_NODE, bad.detail)
        else:
            addresses[host] = (host,)
    if names:
        servers = nameservers if nameservers else system_nameservers()
        querier = _Querier(servers, concurrency, timeout, retries)
        await querier.open()
        try:
            answers = await asyncio.gather(
                *(_resolve_host(querier, n, require_ipv6) for n in names)
            )
        finally:
            querier.close()
        for name, answer in zip(names, answers, strict=True):
            if answer.reason is None:
                addresses[name] = answer.records
            else:
                failures[name] = HostFailure(name, answer.reason, answer.detail)
    return GateResult(addresses, failures)


def resolve_all(
    hosts: Iterable[str],
    *,
    nameservers: list[Nameserver] | None = None,
    require_ipv6: bool = False,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout: float = DEFAULT_TIMEOUT,
    retries: int = DEFAULT_RETRIES,
) -> GateResult:
    """Synchronous entry point of `resolve_all_async`."""
    return asyncio.run(
        resolve_all_async(
            hosts,
            nameservers=nameservers,
            require_ipv6=require_ipv6,
            concurrency=concurrency,
            timeout=timeout,
            retries=retries,
        )
    )


def nameservers_from(
    options: Sequence[str], environ: Mapping[str, str] | None = None
) -> list[tuple[str, int]] | None:
    """--nameserver values, else $TYPHAPKI_NAMESERVERS (comma or space separated), else None
    (the system resolver). The variable lets a pre-commit hook point at a resolver."""
    if options:
        return [parse_nameserver(v) for v in options]
    env = os.environ if environ is None else environ
    values = env.get(NAMESERVERS_ENV, "").replace(",", " ").split()
    try:
        return [parse_nameserver(v) for v in values] or None
    except OptionError as exc:
        raise UsageError(f"${NAMESERVERS_ENV}: {exc.value!r}: {exc.problem}") from None
