"""Debian's real cfssl (`golang-cfssl`) serving its API on a loopback port, and a
recording proxy in front of it.

`CfsslServer` runs `cfssl serve` with a CA made by typhapki and a config with one
profile per role (HMAC `authsign`, `name_whitelist`) plus deliberately misconfigured
profiles the refusal tests ask for by name. `RecordingProxy` forwards to a cfssl and
records every request body; it can also misbehave (delay, 5xx, garbage, a foreign CA)
so the client's fault handling is tested against a real TCP peer.
"""

from __future__ import annotations

import base64
import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from typhapki.pki.issuance import init_ca
from typhapki.pki.layout import CaPaths
from typhapki.pki.settings import KeyType

AUTH_KEY_HEX = "5f4dcc3b5aa765d61d8327deb882cf99a1b2c3d4e5f60718293a4b5c6d7e8f90"
WRONG_KEY_HEX = "00" * 32


def _profile(
    usage: str, whitelist: str | None, auth: bool = True, expiry: str = "8760h"
) -> dict[str, Any]:
    profile: dict[str, Any] = {"usages": ["digital signature", usage], "expiry": expiry}
    if auth:
        profile["auth_key"] = "nodes"
    if whitelist is not None:
        profile["name_whitelist"] = whitelist
    return profile


# The configuration docs/issuance.md recommends (typha, felix), and broken ones.
CFSSL_CONFIG: dict[str, Any] = {
    "signing": {
        "default": {"usages": ["digital signature"], "expiry": "1h", "auth_key": "nodes"},
        "profiles": {
            "typha": _profile("server auth", "^calico-typha$"),
            "felix": _profile("client auth", "^calico-node$"),
            # misconfigured on purpose:
            "felix-as-server": _profile("server auth", None),
            "any-cn": _profile("client auth", None, auth=False),
            "expired": _profile("client auth", None, expiry="1s"),
        },
    },
    "auth_keys": {"nodes": {"type": "standard", "key": AUTH_KEY_HEX}},
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _tls_files(directory: Path) -> tuple[Path, Path, Path]:
    """A TLS CA (not the cluster CA) and a server certificate for 127.0.0.1 it signed."""
    import ipaddress
    from datetime import UTC, datetime, timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from typhapki.pki.profiles import build_ca, cert_pem, key_pem

    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = build_ca(ca_key, "cfssl-api-tls-ca", 30, now)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        # As real servers' certificates carry it: Python 3.13 verifies strictly
        # (VERIFY_X509_STRICT) and refuses a leaf without it (the trixie leg).
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "tls-ca.pem", directory / "tls.pem", directory / "tls-key.pem"
    paths[0].write_bytes(cert_pem(ca))
    paths[1].write_bytes(cert_pem(cert))
    paths[2].write_bytes(key_pem(key))
    return paths


@dataclass
class CfsslServer:
    directory: Path
    ca_dir: Path
    tls: bool = False
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    config: dict[str, Any] = field(default_factory=lambda: CFSSL_CONFIG)

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    @property
    def tls_ca(self) -> Path:
        """The CA to give --cfssl-ca-file (TLS servers only)."""
        return self.directory / "tls-ca.pem"

    @property
    def ca_cert(self) -> Path:
        return CaPaths(self.ca_dir).cert

    def start(self) -> None:
        require("cfssl")
        cfg = self.directory / "cfssl.json"
        cfg.write_text(json.dumps(self.config))
        # cfssl reads an EC key in SEC1 form; typhapki writes PKCS#8: convert with openssl.
        key = self.directory / "ca-key.pem"
        if not key.exists():
            subprocess.run(
                ["openssl", "ec", "-in", str(CaPaths(self.ca_dir).key), "-out", str(key)],
                check=True,
                capture_output=True,
            )
            key.chmod(0o600)
        tls_args: list[str] = []
        if self.tls:
            _, tls_cert, tls_key = _tls_files(self.directory)
            tls_args = ["-tls-cert", str(tls_cert), "-tls-key", str(tls_key)]
        for _ in range(5):  # another process may take the free port first
            self.port = free_port()
            with open(self.directory / "cfssl.log", "ab") as log:
                self.proc = subprocess.Popen(
                    [
                        "cfssl", "serve", "-address", "127.0.0.1", "-port", str(self.port),
                        "-ca", str(self.ca_cert), "-ca-key", str(key), "-config", str(cfg),
                        *tls_args,
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    stdin=subprocess.DEVNULL,
                )  # fmt: skip
            if self._wait_ready():
                return
            self.stop()
        pytest.fail(f"cfssl serve did not start: {(self.directory / 'cfssl.log').read_text()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            assert self.proc is not None
            if self.proc.poll() is not None:
                return False
            try:
                req = urllib.request.Request(
                    f"{self.url}/api/v1/cfssl/info", data=b'{"label":""}', method="POST"
                )
                context = None
                if self.tls:
                    import ssl

                    context = ssl.create_default_context(cafile=str(self.tls_ca))
                with urllib.request.urlopen(req, timeout=2, context=context) as answer:
                    if json.loads(answer.read()).get("success"):
                        return True
            except OSError:
                time.sleep(0.1)
        return False

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


def start_cfssl(
    directory: Path,
    key_type: KeyType = KeyType.ECDSA_P256,
    tls: bool = False,
    config: dict[str, Any] | None = None,
) -> CfsslServer:
    """A cfssl with a fresh CA of its own under `directory` (call .stop() when done),
    with CFSSL_CONFIG unless another configuration is given."""
    ca_dir = directory / "ca"
    init_ca(ca_dir, key_type, 3650, None, force=False)
    server = CfsslServer(directory, ca_dir, tls, config=config or CFSSL_CONFIG)
    server.start()
    return server


@pytest.fixture(scope="session")
def cfssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CfsslServer]:
    """The cluster's cfssl, shared by the session (its CA and config never change)."""
    require("cfssl", "openssl")
    server = start_cfssl(tmp_path_factory.mktemp("cfssl"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def foreign_cfssl(tmp_path_factory: pytest.TempPathFactory) -> Iterator[CfsslServer]:
    """Another cfssl with another CA: what a misrouted or hostile signer looks like."""
    require("cfssl", "openssl")
    server = start_cfssl(tmp_path_factory.mktemp("cfssl-foreign"))
    yield server
    server.stop()


def write_auth_key(path: Path, hex_key: str = AUTH_KEY_HEX) -> Path:
    path.write_text(hex_key + "\n")
    path.chmod(0o600)
    return path


# -- the recording, misbehaving proxy -----------------------------------------------


@dataclass
class Recorded:
    path: str
    body: bytes


@dataclass
class ProxyBehaviour:
    """What the proxy does; `route` picks the upstream URL for a request path."""

    route: Callable[[str], str]
    delay: float = 0.0  # seconds before answering
    status: int | None = None  # answer with this status and `answer` instead of forwarding
    answer: bytes = b""
    rewrite: Callable[[str, bytes], bytes] | None = None  # change the forwarded body
    on_request: Callable[[str], None] | None = None  # e.g. kill cfssl mid-run


@dataclass
class RecordingProxy:
    behaviour: ProxyBehaviour
    # Not in the repr: hypothesis prints the fixture with each example, and a long run
    # of examples through one proxy would print every request body.
    records: list[Recorded] = field(default_factory=list, repr=False)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def request_texts(self) -> list[bytes]:
        """Every body, plus what authsign wraps in base64: all the signer ever saw."""
        out = []
        for rec in self.records:
            out.append(rec.body)
            try:
                doc = json.loads(rec.body)
            except ValueError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("request"), str):
                out.append(base64.b64decode(doc["request"]))
        return out


def _handler(proxy: RecordingProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            proxy.records.append(Recorded(self.path, body))
            b = proxy.behaviour
            if b.on_request is not None:
                b.on_request(self.path)
            if b.delay:
                time.sleep(b.delay)
            if b.status is not None:
                self._send(b.status, b.answer)
                return
            if b.rewrite is not None:
                body = b.rewrite(self.path, body)
            req = urllib.request.Request(
                b.route(self.path) + self.path,
                data=body,
                method="POST",
                headers={"Content-Type": "application/json"},
            )
            try:
                with urllib.request.urlopen(req, timeout=20) as answer:
                    self._send(answer.status, answer.read())
            except urllib.error.HTTPError as exc:
                self._send(exc.code, exc.read())
            except OSError:
                self._send(502, b"<html>502 Bad Gateway</html>")

        def _send(self, status: int, data: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (timeout test)

    return Handler


def start_proxy(behaviour: ProxyBehaviour) -> RecordingProxy:
    """A recording proxy on a loopback port (stop it with `stop_proxy`)."""
    proxy = RecordingProxy(behaviour)
    proxy.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy))
    proxy.server.daemon_threads = True
    threading.Thread(target=proxy.server.serve_forever, daemon=True).start()
    return proxy


def stop_proxy(proxy: RecordingProxy) -> None:
    assert proxy.server is not None
    proxy.server.shutdown()
    proxy.server.server_close()


@pytest.fixture
def proxy_for() -> Iterator[Callable[[ProxyBehaviour], RecordingProxy]]:
    """Start recording proxies on loopback ports; all stopped after the test."""
    started: list[RecordingProxy] = []

    def start(behaviour: ProxyBehaviour) -> RecordingProxy:
        started.append(start_proxy(behaviour))
        return started[-1]

    yield start
    for proxy in started:
        stop_proxy(proxy)
