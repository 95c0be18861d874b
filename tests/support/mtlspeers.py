"""Typhas the mTLS proof is tried against (typhapki/firewall/mtls_probe.py).

Each context manager yields the HOST:PORT of one server on loopback, serving the Typha
pair of a set under `out`:

- `go_typha`: tests/peers/typhaserver in -mode verify (Calico's Typha with TLS on),
  no-client-cert (TLS, no client check) or plain (TLS off);
- `openssl_typha`: `openssl s_server` with the flags given (-Verify, -verify, ...);
- `hanging_typha`: a socket that accepts connections and never says a word;
- `closed_port`: a port bound but not listening (connections refused), held for the
  duration so that nothing else can take it.
"""

from __future__ import annotations

import socket
import subprocess
from collections.abc import Iterator
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
def openssl_typha(out: Path, *flags: str) -> Iterator[str]:
    require("openssl")
    paths = SetPaths(out)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-naccept", str(CONNECTIONS),
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
        yield f"127.0.0.1:{port}"
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
