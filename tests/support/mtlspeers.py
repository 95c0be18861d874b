"""Typhas the mTLS proof is tried against (typhapki/firewall/mtls_probe.py).

Each context manager yields the HOST:PORT of one server on loopback, serving the Typha
pair of a set under `out`:

- `go_typha`: tests/peers/typhaserver in -mode verify (Calico's Typha with TLS on),
  no-client-cert (TLS, no client check) or plain (TLS off);
- `openssl_typha`: `openssl s_server` with the flags given (-Verify, -verify, ...);
- `hanging_typha`: a socket that accepts connections and never says a word;
- `split_typha`: a front that hands a connection whose ClientHello offers TLS 1.3 to
  one server and any other to another (a Typha that enforces mTLS under TLS 1.2 only);
- `silent_tls13_typha`: Python's ssl under TLS 1.3 that asks for a certificate but
  takes none, sends no session ticket and never says a word after the handshake;
- `closed_port`: a port bound but not listening (connections refused), held for the
  duration so that nothing else can take it;
- `shedding_typha`: a front that hands its first connections to a Typha, then closes
  (or resets) every later one on its ClientHello, before any answer: a Typha that sheds
  connections;
- `picky_typha`: a front that hands a connection whose ClientHello offers TLS 1.3 to a
  Typha and closes (or resets) any other before any answer, never with an alert.
"""

from __future__ import annotations

import socket
import ssl
import struct
import subprocess
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.conftest import require
from tests.support.gopeers import GoPeers, typha_env, typha_server
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import RoleName

# The proof makes up to four connections per run (a listen check, then three probes).
CONNECTIONS = 40


@contextmanager
def go_typha(peers: GoPeers, out: Path, mode: str, **env: str) -> Iterator[str]:
    """`env`: more of Typha's variables, such as TLS_MIN_VERSION."""
    with typha_server(peers, {**typha_env(out), **env}, CONNECTIONS, ("-mode", mode)) as server:
        yield f"127.0.0.1:{server.port}"


@contextmanager
def openssl_typha(out: Path, *flags: str, host: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """`port` 0: a free one."""
    require("openssl")
    paths = SetPaths(out)
    if not port:
        with socket.socket() as sock:
            sock.bind((host, 0))
            port = sock.getsockname()[1]
    proc = subprocess.Popen(
        ["openssl", "s_server", "-accept", f"{host}:{port}", "-naccept", str(CONNECTIONS),
         "-cert", str(paths.cert(RoleName.TYPHA)), "-key", str(paths.key(RoleName.TYPHA)),
         "-CAfile", str(paths.bundle), *flags],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = "-"
        while line and not line.startswith("ACCEPT"):  # "ACCEPT" once it listens
            line = proc.stdout.readline()
        assert line, "openssl s_server did not start"
        yield f"{host}:{port}"
    finally:
        proc.kill()
        proc.communicate()


@contextmanager
def hanging_typha() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen(64)  # the kernel completes the TCP handshakes; nobody ever reads
        yield f"127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def closed_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def offers_tls13(hello: bytes) -> bool:
    """Whether a ClientHello record lists TLS 1.3 in its supported_versions extension."""
    try:
        at = 5 + 4 + 2 + 32  # record and handshake headers, client_version, random
        at += 1 + hello[at]  # session id
        at += 2 + int.from_bytes(hello[at : at + 2], "big")  # cipher suites
        at += 1 + hello[at]  # compression methods
        end = at + 2 + int.from_bytes(hello[at : at + 2], "big")
        at += 2
        while at + 4 <= end:
            kind, size = (int.from_bytes(hello[at + i : at + i + 2], "big") for i in (0, 2))
            body = hello[at + 4 : at + 4 + size]
            if kind == 43:  # supported_versions: a length byte, then 2 bytes each
                return any(body[i : i + 2] == b"\x03\x04" for i in range(1, len(body), 2))
            at += 4 + size
    except IndexError:
        pass
    return False


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
        sink.shutdown(socket.SHUT_WR)
    except OSError:
        pass


@contextmanager
def _accepting(on_client: Callable[[socket.socket], None]) -> Iterator[str]:
    """HOST:PORT of a loopback listener whose every accepted connection goes to
    `on_client`, in one serving thread, until the block ends."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                client, _ = listener.accept()
            except OSError:
                continue
            on_client(client)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        listener.close()


@contextmanager
def _front(route: Callable[[bytes], str | None], reset: bool = False) -> Iterator[str]:
    """HOST:PORT of a front that reads each connection's ClientHello record and sends the
    connection to the HOST:PORT `route` names for it, byte for byte (the TLS is end to
    end); `route` None: the front closes it there, before any answer, with a RST when
    `reset` (SO_LINGER 0), else a FIN."""

    def handle(client: socket.socket) -> None:
        with client:
            client.settimeout(10)
            hello = client.recv(5)
            while len(hello) >= 5 and len(hello) < 5 + int.from_bytes(hello[3:5], "big"):
                more = client.recv(65536)
                if not more:
                    return
                hello += more
            target = route(hello)
            if target is None:
                if reset:
                    client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return
            host, port = target.rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as server:
                server.sendall(hello)
                back = threading.Thread(target=_pipe, args=(server, client), daemon=True)
                back.start()
                _pipe(client, server)
                back.join(10)

    def each(client: socket.socket) -> None:
        threading.Thread(target=handle, args=(client,), daemon=True).start()

    with _accepting(each) as address:
        yield address


@contextmanager
def split_typha(tls12: str, tls13: str) -> Iterator[str]:
    """HOST:PORT of a front sending each connection to `tls13` when its ClientHello
    offers TLS 1.3, else to `tls12`, byte for byte (the TLS is end to end)."""
    with _front(lambda hello: tls13 if offers_tls13(hello) else tls12) as address:
        yield address


@contextmanager
def shedding_typha(typha: str, answered: int = 1, reset: bool = False) -> Iterator[str]:
    """HOST:PORT of a front that hands its first `answered` connections to `typha`, then
    closes every later one on its ClientHello (with a RST when `reset`): a Typha that
    accepted Felix, then sheds every connection before its ServerHello."""
    count = iter(range(10**6))
    with _front(lambda _: typha if next(count) < answered else None, reset) as address:
        yield address


@contextmanager
def picky_typha(typha: str, reset: bool = True) -> Iterator[str]:
    """HOST:PORT of a front that hands a connection offering TLS 1.3 (Felix) to `typha`
    and drops any other on its ClientHello, with a RST (`reset`) or a FIN, never an
    alert: it answers the good client and refuses nothing in words."""
    with _front(lambda hello: typha if offers_tls13(hello) else None, reset) as address:
        yield address


@contextmanager
def silent_tls13_typha(out: Path) -> Iterator[str]:
    """A TLS 1.3 server that asks for a client certificate, takes a client without one,
    sends no session ticket, and then keeps the connection open without a word."""
    paths = SetPaths(out)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3
    ctx.load_cert_chain(paths.cert(RoleName.TYPHA), paths.key(RoleName.TYPHA))
    ctx.load_verify_locations(paths.bundle)
    ctx.verify_mode = ssl.CERT_OPTIONAL
    ctx.num_tickets = 0
    held: list[socket.socket] = []

    def hold(client: socket.socket) -> None:
        try:
            client.settimeout(5)
            held.append(ctx.wrap_socket(client, server_side=True))
        except (OSError, ssl.SSLError):
            client.close()

    try:
        with _accepting(hold) as address:
            yield address
    finally:
        for conn in held:
            conn.close()
