"""A hostile cfssl: an HTTP(S) server on loopback that answers exactly the bytes a
test asks for, as slowly as it asks.

Unlike `tests/support/cfssl.py`'s recording proxy (a well-behaved HTTP server in front
of the real cfssl), this one writes raw bytes on the socket, so it can trickle the
status line, headers and body a few bytes at a time, redirect, nest its JSON without
end, send more than any answer should hold, put control characters into its error
messages, and swap the certificate (and so the CA) it presents over TLS between two
connections. Every request it received is recorded.
"""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.cfssl import _tls_files


@dataclass(frozen=True)
class Answer:
    """What the server sends back for one request."""

    status: int = 200
    body: bytes = b""
    headers: tuple[tuple[str, str], ...] = ()
    chunk: int = 0  # bytes per write; 0: everything in one write
    interval: float = 0.0  # pause before each write

    def wire(self) -> bytes:
        head = [f"HTTP/1.1 {self.status} Whatever", f"Content-Length: {len(self.body)}"]
        head += [f"{name}: {value}" for name, value in self.headers]
        return ("\r\n".join(head) + "\r\n\r\n").encode() + self.body


def cfssl_json(success: bool, result: object = None, messages: tuple[str, ...] = ()) -> bytes:
    """A body in cfssl's answer shape."""
    errors = [{"code": 1000, "message": m} for m in messages]
    return json.dumps({"success": success, "result": result, "errors": errors}).encode()


def nested_json(depth: int) -> bytes:
    """cfssl's shape with `result` nested `depth` levels deep."""
    return b'{"success": true, "result": ' + b'{"a": [' * depth + b"]}" * depth + b"}"


@dataclass
class Received:
    path: str
    body: bytes


@dataclass
class HostileCfssl:
    """The server; `respond(path, body)` decides each answer."""

    respond: Callable[[str, bytes], Answer]
    tls_dir: Path | None = None  # TLS when given: certificates are made there
    received: list[Received] = field(default_factory=list)
    tls_ca: Path | None = None  # the CA of the certificate presented now
    _listener: socket.socket | None = None
    _context: ssl.SSLContext | None = None
    _stopped: bool = False

    url: str = ""  # set by start()

    def start(self) -> HostileCfssl:
        if self.tls_dir is not None:
            self.swap_tls_ca()
        self._listener = socket.create_server(("127.0.0.1", 0))
        port = self._listener.getsockname()[1]
        self.url = f"{'https' if self.tls_dir else 'http'}://127.0.0.1:{port}"
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def swap_tls_ca(self) -> Path:
        """Present a certificate from a new TLS CA from the next connection on; its CA file."""
        assert self.tls_dir is not None
        directory = self.tls_dir / f"tls{time.monotonic_ns()}"
        directory.mkdir()
        ca, cert, key = _tls_files(directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self._context = context
        self.tls_ca = ca
        return ca

    def stop(self) -> None:
        self._stopped = True
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        assert self._listener is not None
        while not self._stopped:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError), contextlib.ExitStack() as stack:
            stack.callback(conn.close)
            conn.settimeout(10)
            if self._context is not None:
                conn = self._context.wrap_socket(conn, server_side=True)
                stack.callback(conn.close)
            data = b""
            while b"\r\n\r\n" not in data:
                more = conn.recv(65536)
                if not more:
                    return
                data += more
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            length = 0
            for line in lines[1:]:
                name, _, value = line.partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            while len(body) < length:
                more = conn.recv(65536)
                if not more:
                    return
                body += more
            path = lines[0].split(" ")[1]
            self.received.append(Received(path, body))
            answer = self.respond(path, body)
            wire = answer.wire()
            step = answer.chunk or len(wire)
            for start in range(0, len(wire), step):
                if self._stopped:
                    return
                if answer.interval:
                    time.sleep(answer.interval)
                conn.sendall(wire[start : start + step])


@contextlib.contextmanager
def serving(respond: Callable[[str, bytes], Answer]) -> Iterator[HostileCfssl]:
    """One plain-HTTP hostile server for a block (one per hypothesis example)."""
    server = HostileCfssl(respond).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def hostile_cfssl(tmp_path: Path) -> Iterator[Callable[..., HostileCfssl]]:
    """Start hostile servers (`tls=True` for HTTPS); all stopped after the test."""
    started: list[HostileCfssl] = []

    def start(respond: Callable[[str, bytes], Answer], tls: bool = False) -> HostileCfssl:
        tls_dir = None
        if tls:
            tls_dir = tmp_path / f"hostile{len(started)}"
            tls_dir.mkdir()
        server = HostileCfssl(respond, tls_dir).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
