"""Real mutual TLS between a Typha-like server and a Felix-like client (stdlib ssl).

The server behaves like Typha's syncserver: it requires a client certificate that
chains to one of the CAs in its bundle with EKU clientAuth (OpenSSL's "sslclient"
purpose, like Go's ExtKeyUsageClientAuth), then checks the client identity: exact CN
match or one of the URI SANs (either is enough when both are configured). The
client behaves like Felix's syncclient: it verifies the server chain against its
own bundle with EKU serverAuth, no hostname check, then checks the server's CN/URI.

Only then does the server say hello, so a server-side rejection is seen by the
client too (under TLS 1.3 the client's handshake completes before the server has
looked at the client certificate).

Everything is bounded: 127.0.0.1, an ephemeral port, socket timeouts, a joined thread.
"""

from __future__ import annotations

import socket
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import RoleName

HELLO = b"typha-hello\n"


@dataclass(frozen=True)
class PeerFiles:
    """What one side loads: its CA bundle, its certificate (chain) and key."""

    ca_bundle: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class Expect:
    """The identity one side requires of the other (TYPHA_CLIENT* or FELIX_TYPHA*)."""

    cn: str | None = None
    uri_san: str | None = None


@dataclass(frozen=True)
class HandshakeResult:
    ok: bool
    server_error: str | None = None
    client_error: str | None = None

    @property
    def error(self) -> str | None:
        return self.server_error or self.client_error


def typha_files(out: Path) -> PeerFiles:
    """Typha's view of a node's set (the paths its env would name)."""
    paths = SetPaths(out)
    return PeerFiles(paths.bundle, paths.cert(RoleName.TYPHA), paths.key(RoleName.TYPHA))


def felix_files(out: Path) -> PeerFiles:
    paths = SetPaths(out)
    return PeerFiles(paths.bundle, paths.cert(RoleName.FELIX), paths.key(RoleName.FELIX))


def _identity_error(peer: dict[str, Any], expect: Expect, who: str) -> str | None:
    """Typha's/Felix's identity rule: CN equal, or a URI SAN equal; either suffices."""
    if expect.cn is None and expect.uri_san is None:
        return None
    cns = [v for rdn in peer.get("subject", ()) for (k, v) in rdn if k == "commonName"]
    uris = [v for (k, v) in peer.get("subjectAltName", ()) if k == "URI"]
    if expect.cn is not None and cns and cns[0] == expect.cn:
        return None
    if expect.uri_san is not None and expect.uri_san in uris:
        return None
    return f"{who} identity mismatch: CN={cns[:1]} URI={uris}, want {expect}"


def _server_context(files: PeerFiles) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(files.ca_bundle))
    ctx.load_cert_chain(str(files.cert), str(files.key))
    return ctx


def _client_context(files: PeerFiles) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = False  # Felix checks CN/URI SAN, never a hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.load_verify_locations(cafile=str(files.ca_bundle))
    ctx.load_cert_chain(str(files.cert), str(files.key))
    return ctx


def handshake(
    server: PeerFiles,
    client: PeerFiles,
    client_identity: Expect = Expect(),
    server_identity: Expect = Expect(),
    timeout: float = 10.0,
) -> HandshakeResult:
    """One mutual TLS connection from a Felix-like client to a Typha-like server.

    `client_identity` is what the server requires of the client (TYPHA_CLIENTCN/URISAN),
    `server_identity` what the client requires of the server (FELIX_TYPHACN/URISAN).
    """
    # Contexts are built here so a bad file fails the caller, not a thread.
    server_ctx = _server_context(server)
    client_ctx = _client_context(client)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(timeout)
    port = listener.getsockname()[1]
    server_error: list[str] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError as exc:
            server_error.append(f"accept: {exc}")
            return
        with conn:
            conn.settimeout(timeout)
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    peer = tls.getpeercert()
                    problem = _identity_error(peer or {}, client_identity, "client")
                    if problem is not None:
                        server_error.append(problem)
                        return  # Typha closes the connection
                    tls.sendall(HELLO)
            except (OSError, ssl.SSLError) as exc:
                server_error.append(f"{type(exc).__name__}: {exc}")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    client_error: str | None = None
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw,
            client_ctx.wrap_socket(raw) as tls,
        ):
            problem = _identity_error(tls.getpeercert() or {}, server_identity, "server")
            if problem is not None:
                client_error = problem
            else:
                data = b""
                while len(data) < len(HELLO):
                    chunk = tls.recv(len(HELLO) - len(data))
                    if not chunk:
                        break
                    data += chunk
                if data != HELLO:
                    client_error = f"server closed the connection (got {data!r})"
    except (OSError, ssl.SSLError) as exc:
        client_error = f"{type(exc).__name__}: {exc}"
    finally:
        thread.join(timeout)
        listener.close()
    if thread.is_alive():
        server_error.append("server thread did not finish in time")
    return HandshakeResult(
        ok=not server_error and client_error is None,
        server_error="; ".join(server_error) or None,
        client_error=client_error,
    )


def node_to_node(
    typha_out: Path,
    felix_out: Path,
    felix_cn: str = "calico-node",
    typha_cn: str = "calico-typha",
) -> HandshakeResult:
    """Typha of one node's set serving Felix of another's, with the default CNs."""
    return handshake(
        typha_files(typha_out),
        felix_files(felix_out),
        client_identity=Expect(cn=felix_cn),
        server_identity=Expect(cn=typha_cn),
    )
