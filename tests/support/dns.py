"""Real DNS servers for tests: dnsmasq on a loopback port, and tiny scripted servers.

`dnsmasq_server` (fixture factory) runs Debian's dnsmasq with a hosts file of the
records you give it; names under the test domains that are not in the file answer
NXDOMAIN, a name with only an A record answers AAAA with no data. `ScriptedDns` is a
stdlib-socket UDP server in a thread for what dnsmasq will not do on demand: SERVFAIL,
REFUSED, never answering (timeout), and answering every name after a delay.

Usage::

    def test_x(dnsmasq_server):
        dns = dnsmasq_server({"a.example.test": ["10.0.0.1", "fd00::1"]})
        resolve_all(["a.example.test"], nameservers=[dns.nameserver])

    with ScriptedDns({"x.test": Behaviour.SERVFAIL}) as server: ...
"""

from __future__ import annotations

import contextlib
import heapq
import ipaddress
import os
import socket
import subprocess
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    import dns.message

from tests.conftest import require

# Names under these domains are answered by dnsmasq only from the hosts file.
LOCAL_DOMAINS = ("test", "wmnet", "example")


def free_port(kind: int = socket.SOCK_DGRAM) -> int:
    """A port free for both UDP and TCP on 127.0.0.1 right now."""
    for _ in range(50):
        with socket.socket(socket.AF_INET, kind) as probe:
            probe.bind(("127.0.0.1", 0))
            port = int(probe.getsockname()[1])
        with contextlib.suppress(OSError), socket.socket() as tcp:
            tcp.bind(("127.0.0.1", port))
            return port
    raise RuntimeError("no free port")


def ask(nameserver: tuple[str, int], name: str, rdtype: str = "A", timeout: float = 1.0) -> int:
    """One query; returns the rcode (raises dns.exception.Timeout when silent)."""
    import dns.message
    import dns.query

    response = dns.query.udp(
        dns.message.make_query(name, rdtype), nameserver[0], port=nameserver[1], timeout=timeout
    )
    return int(response.rcode())


def hosts_file_text(records: Mapping[str, Sequence[str]]) -> str:
    lines = [f"{address} {name}" for name, addresses in records.items() for address in addresses]
    return "\n".join(lines) + "\n"


@dataclass
class Dnsmasq:
    """A running dnsmasq: query it at `nameserver` (also `--nameserver` text `arg`)."""

    process: subprocess.Popen[bytes]
    port: int
    hosts_file: Path
    address: str = "127.0.0.1"

    @property
    def nameserver(self) -> tuple[str, int]:
        return (self.address, self.port)

    @property
    def arg(self) -> str:
        return f"{self.address}:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


def start_dnsmasq(
    directory: Path,
    records: Mapping[str, Sequence[str]] | None = None,
    hosts_file: Path | None = None,
) -> Dnsmasq:
    """Start dnsmasq on a free loopback port serving `records` (or `hosts_file`)."""
    require("dnsmasq")
    directory.mkdir(parents=True, exist_ok=True)
    if hosts_file is None:
        hosts_file = directory / f"dnsmasq-hosts-{os.getpid()}-{time.monotonic_ns()}"
        hosts_file.write_text(hosts_file_text(records or {}))
    last_error = ""
    for _ in range(5):
        port = free_port()
        args = [
            "dnsmasq",
            "--no-daemon",
            "--conf-file=/dev/null",
            f"--port={port}",
            "--listen-address=127.0.0.1",
            "--bind-interfaces",
            "--no-resolv",
            "--no-hosts",
            f"--addn-hosts={hosts_file}",
            "--user=root",
            "--group=root",
            "--pid-file=",
            "--no-negcache",
            "--cache-size=10000",
            "--dns-forward-max=10000",
            *(f"--local=/{domain}/" for domain in LOCAL_DOMAINS),
        ]
        log = directory / f"dnsmasq-{port}.log"
        with log.open("wb") as log_file:  # a file, not a pipe: it can never fill up
            process = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
            )
        server = Dnsmasq(process, port, hosts_file)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if process.poll() is not None:
                last_error = log.read_text(errors="replace")
                break
            try:
                ask(server.nameserver, "ready.probe.test", timeout=0.2)
                return server
            except Exception:
                time.sleep(0.02)
        server.stop()
    raise RuntimeError(f"dnsmasq did not start: {last_error.strip()}")


@pytest.fixture
def dnsmasq_server(tmp_path: Path) -> Iterator[Callable[..., Dnsmasq]]:
    """Factory fixture: `dnsmasq_server(records)` starts one; all stop after the test."""
    started: list[Dnsmasq] = []

    def factory(
        records: Mapping[str, Sequence[str]] | None = None, hosts_file: Path | None = None
    ) -> Dnsmasq:
        server = start_dnsmasq(tmp_path / "dnsmasq", records, hosts_file)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop()


class Behaviour(Enum):
    SERVFAIL = "servfail"
    REFUSED = "refused"
    SILENT = "silent"  # never answers: the client times out
    NXDOMAIN = "nxdomain"
    NODATA = "nodata"  # NOERROR, empty answer
    SYNTHESIZE = "synthesize"  # A and AAAA derived from the name (see synthetic_addresses)
    MISMATCH = "mismatch"  # answers, but for another question (a spoofing attempt)


def synthetic_addresses(name: str) -> tuple[str, str]:
    """The A and AAAA a SYNTHESIZE server gives `name`: stable, distinct per name."""
    n = zlib.crc32(name.lower().rstrip(".").encode()) & 0xFFFFFF
    v4 = ipaddress.IPv4Address((10 << 24) | n)
    v6 = ipaddress.IPv6Address((0xFD00 << 112) | n)
    return str(v4), str(v6)


def _parse_question(wire: bytes) -> tuple[str, int, bytes] | None:
    """(lowercased name, qtype, question bytes) of a one-question query, else None."""
    if len(wire) < 17 or wire[2] & 0x80 or wire[4:6] != b"\x00\x01":
        return None
    labels: list[str] = []
    pos = 12
    while pos < len(wire) and wire[pos] != 0:
        length = wire[pos]
        if length > 63 or pos + 1 + length > len(wire):
            return None
        labels.append(wire[pos + 1 : pos + 1 + length].decode("ascii", "replace").lower())
        pos += 1 + length
    end = pos + 5
    if end > len(wire):
        return None
    qtype = int.from_bytes(wire[pos + 1 : pos + 3], "big")
    return ".".join(labels), qtype, wire[12:end]


class ScriptedDns:
    """A UDP DNS server on 127.0.0.1 in a thread.

    `zone` maps names to a Behaviour or a list of addresses; other names get `default`.
    A key "NAME AAAA" (or "NAME A") applies to that record type only.
    Every answer is sent `delay` seconds after the query arrived (queries are not
    serialised by the delay: many can be pending at once, like a far-away server).
    """

    def __init__(
        self,
        zone: Mapping[str, Behaviour | Sequence[str]] | None = None,
        default: Behaviour = Behaviour.NXDOMAIN,
        delay: float = 0.0,
    ) -> None:
        self.zone = {k.lower().rstrip("."): v for k, v in (zone or {}).items()}
        self.default = default
        self.delay = delay
        self.queries = 0
        self.max_pending = 0  # most answers waiting at once: queries in flight (delay > 0)
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * 1024 * 1024)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self._stop = threading.Event()
        self._pending: list[tuple[float, int, bytes, tuple[str, int]]] = []
        self._cond = threading.Condition()
        self._seq = 0
        self._threads = [
            threading.Thread(target=self._receive, daemon=True),
            threading.Thread(target=self._send, daemon=True),
        ]

    @property
    def nameserver(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def arg(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedDns:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            thread.join(timeout=5)
        self.sock.close()

    def _answer(self, wire: bytes) -> bytes | None:
        """The response bytes for one query, built by hand (fast enough for 10k queries)."""
        question = _parse_question(wire)
        if question is None:
            return None
        name, qtype, question_wire = question
        qtype_text = {1: "A", 28: "AAAA"}.get(qtype, str(qtype))
        rule = self.zone.get(f"{name} {qtype_text.lower()}", self.zone.get(name, self.default))
        if rule is Behaviour.SILENT:
            return None
        rcode = {Behaviour.SERVFAIL: 2, Behaviour.REFUSED: 5, Behaviour.NXDOMAIN: 3}.get(
            rule if isinstance(rule, Behaviour) else Behaviour.NODATA, 0
        )
        answers: list[bytes] = []
        if rule is Behaviour.MISMATCH:
            # An answer for "x.<name>" instead of "<name>": what an off-path spoofer might send.
            question_wire = b"\x01x" + question_wire
            rule = ["10.10.10.10", "fd00::1010"]
        if rcode == 0 and rule is not Behaviour.NODATA:
            addresses = list(synthetic_addresses(name)) if rule is Behaviour.SYNTHESIZE else rule
            assert not isinstance(addresses, Behaviour)
            for address in addresses:
                packed = ipaddress.ip_address(address).packed
                if (qtype, len(packed)) in ((1, 4), (28, 16)):
                    answers.append(
                        b"\xc0\x0c"
                        + qtype.to_bytes(2, "big")
                        + b"\x00\x01\x00\x00\x00\x3c"
                        + len(packed).to_bytes(2, "big")
                        + packed
                    )
        rd = wire[2] & 0x01
        flags = bytes([0x80 | 0x04 | rd, 0x80 | rcode])  # QR AA RD, RA + rcode
        header = wire[:2] + flags + b"\x00\x01" + len(answers).to_bytes(2, "big") + b"\x00" * 4
        return header + question_wire + b"".join(answers)

    def _receive(self) -> None:
        while not self._stop.is_set():
            try:
                wire, peer = self.sock.recvfrom(4096)
            except (TimeoutError, OSError):
                continue
            self.queries += 1
            due = time.monotonic() + self.delay
            answer = self._answer(wire)
            if answer is None:
                continue
            if self.delay <= 0:
                with contextlib.suppress(OSError):
                    self.sock.sendto(answer, peer)
                continue
            with self._cond:
                self._seq += 1
                heapq.heappush(self._pending, (due, self._seq, answer, peer))
                self.max_pending = max(self.max_pending, len(self._pending))
                self._cond.notify()

    def _send(self) -> None:
        while not self._stop.is_set():
            with self._cond:
                while not self._pending and not self._stop.is_set():
                    self._cond.wait(0.1)
                if self._stop.is_set():
                    return
                due, _, answer, peer = self._pending[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._pending)
            with contextlib.suppress(OSError):
                self.sock.sendto(answer, peer)


@pytest.fixture
def scripted_dns() -> Iterator[Callable[..., ScriptedDns]]:
    """Factory fixture: `scripted_dns(zone, default=..., delay=...)`, stopped after the test."""
    started: list[ScriptedDns] = []

    def factory(
        zone: Mapping[str, Behaviour | Sequence[str]] | None = None,
        default: Behaviour = Behaviour.NXDOMAIN,
        delay: float = 0.0,
    ) -> ScriptedDns:
        server = ScriptedDns(zone, default, delay).__enter__()
        started.append(server)
        return server

    yield factory
    for server in started:
        server.__exit__(None, None, None)


Handler = Callable[["dns.message.Message"], "dns.message.Message | None"]


class AnswerDns:
    """A UDP DNS server on 127.0.0.1 whose answers a test writes with dnspython.

    `handler(query)` returns the response message (any records, for any owner name,
    any flags), or None to stay silent; it can be swapped between examples. With
    `tcp="close"` a TCP listener on the same port accepts and closes every connection
    at once: together with a TC answer, the server that made `ferm` print `Aborted!`.
    """

    def __init__(self, handler: Handler, tcp: str | None = None) -> None:
        self.handler = handler
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.tcp: socket.socket | None = None
        if tcp == "close":
            self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            self.tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self.tcp.bind(("127.0.0.1", self.port))
            self.tcp.listen(64)
            self.tcp.settimeout(0.1)
        self.queries = 0
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve_udp, daemon=True)]
        if self.tcp is not None:
            self._threads.append(threading.Thread(target=self._serve_tcp, daemon=True))

    @property
    def nameserver(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    @property
    def arg(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> AnswerDns:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self.sock.close()
        if self.tcp is not None:
            self.tcp.close()

    def _serve_udp(self) -> None:
        import dns.message

        while not self._stop.is_set():
            try:
                wire, peer = self.sock.recvfrom(4096)
            except (TimeoutError, OSError):
                continue
            self.queries += 1
            try:
                query = dns.message.from_wire(wire)
                response = self.handler(query)
            except Exception:  # a test's handler bug must show as a timeout, not a hang
                continue
            if response is not None:
                with contextlib.suppress(OSError):
                    self.sock.sendto(response.to_wire(), peer)

    def _serve_tcp(self) -> None:
        assert self.tcp is not None
        while not self._stop.is_set():
            try:
                conn, _ = self.tcp.accept()
            except (TimeoutError, OSError):
                continue
            # Read the query first, so the hang-up is a clean close (FIN), not a reset.
            conn.settimeout(2)
            with contextlib.suppress(OSError):
                conn.recv(4096)
            conn.close()  # then hang up: no answer over TCP


def answer(
    query: dns.message.Message, records: Sequence[tuple[str, str, str]]
) -> dns.message.Message:
    """A NOERROR response to `query` carrying `records`: (owner, type, data) each,
    e.g. ("other.test.", "A", "10.0.0.1") or ("a.test.", "CNAME", "b.test.")."""
    import dns.message
    import dns.rrset

    response = dns.message.make_response(query)
    for owner, rdtype, data in records:
        response.answer.append(dns.rrset.from_text(owner, 60, "IN", rdtype, data))
    return response
