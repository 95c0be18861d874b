"""Real handshakes with the issued set: Python `ssl` peers that check identities the
way Typha and Felix do, and the seed guide's `openssl s_server -Verify` + `curl` check.

(Go's crypto/tls, which Typha and Felix are built on, is exercised separately in
tests/test_go_interop.py.)
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require, run_cli
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import RoleName

TYPHA, FELIX = RoleName.TYPHA, RoleName.FELIX


@dataclass
class Peer:
    cert: Path
    key: Path
    ca: Path
    cn: str | None = None  # the identity required of the OTHER side
    uri_san: str | None = None


def peer(out: Path, role: RoleName, cn: str | None = None, uri: str | None = None) -> Peer:
    paths = SetPaths(out)
    return Peer(paths.cert(role), paths.key(role), paths.bundle, cn, uri)


def identity_ok(cert: Any, cn: str | None, uri: str | None) -> bool:
    """Typha's rule: with both set, either match is enough; CN is case-sensitive."""
    cert = cert or {}
    cns = [v for rdn in cert.get("subject", ()) for (k, v) in rdn if k == "commonName"]
    uris = [v for (k, v) in cert.get("subjectAltName", ()) if k == "URI"]
    return (cn is not None and cn in cns) or (uri is not None and uri in uris)


def handshake(server: Peer, client: Peer) -> str:
    """One mutual TLS handshake on loopback. Returns "ok" or the first error seen."""
    sctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    sctx.minimum_version = ssl.TLSVersion.TLSv1_2
    sctx.verify_mode = ssl.CERT_REQUIRED  # RequireAndVerifyClientCert
    sctx.load_cert_chain(server.cert, server.key)
    sctx.load_verify_locations(server.ca)
    cctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    cctx.minimum_version = ssl.TLSVersion.TLSv1_2
    cctx.check_hostname = False  # Felix checks CN/URI SAN, never the hostname
    cctx.verify_mode = ssl.CERT_REQUIRED
    cctx.load_cert_chain(client.cert, client.key)
    cctx.load_verify_locations(client.ca)

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    port = listener.getsockname()[1]
    server_result: list[str] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
            with sctx.wrap_socket(conn, server_side=True) as tls:
                cert = tls.getpeercert()
                if not identity_ok(cert, server.cn, server.uri_san):
                    server_result.append("server: peer certificate does not have required CN")
                    return
                tls.sendall(b"ok")
                server_result.append("ok")
        except (ssl.SSLError, OSError) as exc:
            server_result.append(f"server: {exc}")

    thread = threading.Thread(target=serve)
    thread.start()
    client_result = "ok"
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            cctx.wrap_socket(raw) as tls,
        ):
            if not identity_ok(tls.getpeercert(), client.cn, client.uri_san):
                client_result = "client: Typha certificate does not have required CN"
            else:
                data = tls.recv(2)
                if data != b"ok":
                    client_result = "client: connection closed by Typha"
    except (ssl.SSLError, OSError) as exc:
        client_result = f"client: {exc}"
    finally:
        thread.join(timeout=15)
        listener.close()
    if server_result and server_result[0] != "ok":
        return server_result[0]
    return client_result


@pytest.mark.parametrize("key_type", ["ecdsa-p256", "ecdsa-p384", "rsa-2048", "rsa-4096"])
def test_typha_and_felix_sets_complete_mutual_tls(tmp_path: Path, key_type: str) -> None:
    ca, out = tmp_path / "ca", tmp_path / "out"
    assert run_cli("ca", "init", "--ca-dir", ca, "--key-type", key_type).returncode == 0
    assert run_cli("issue", "--ca-dir", ca, "--out", out, "--key-type", key_type).returncode == 0
    typha = peer(out, TYPHA, cn="calico-node")  # TYPHA_CLIENTCN
    felix = peer(out, FELIX, cn="calico-typha")  # FELIX_TYPHACN
    assert handshake(typha, felix) == "ok"


def test_uri_san_only_identities(tmp_path: Path) -> None:
    ca, out = tmp_path / "ca", tmp_path / "out"
    assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    result = run_cli(
        "issue", "--ca-dir", ca, "--out", out,
        "--typha-uri-san", "spiffe://k8s.example/typha",
        "--felix-uri-san", "spiffe://k8s.example/calico-node",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    typha = peer(out, TYPHA, uri="spiffe://k8s.example/calico-node")
    felix = peer(out, FELIX, uri="spiffe://k8s.example/typha")
    assert handshake(typha, felix) == "ok"
    # And the identity check has teeth: a CN-only expectation fails.
    assert "required CN" in handshake(peer(out, TYPHA, cn="calico-node"), felix)


def test_wrong_cn_is_refused(issued: Path) -> None:
    result = handshake(
        peer(issued, TYPHA, cn="Calico-Node"), peer(issued, FELIX, cn="calico-typha")
    )
    assert result == "server: peer certificate does not have required CN"


def test_felix_certificate_as_server_is_refused(issued: Path) -> None:
    paths = SetPaths(issued)
    wrong_server = Peer(paths.cert(FELIX), paths.key(FELIX), paths.bundle, cn="calico-node")
    result = handshake(wrong_server, peer(issued, FELIX, cn="calico-node"))
    assert "unsuitable certificate purpose" in result or "unsupported certificate" in result


def test_typha_certificate_as_client_is_refused(issued: Path) -> None:
    paths = SetPaths(issued)
    wrong_client = Peer(paths.cert(TYPHA), paths.key(TYPHA), paths.bundle, cn="calico-typha")
    result = handshake(peer(issued, TYPHA, cn="calico-typha"), wrong_client)
    assert "unsuitable certificate purpose" in result or "unsupported certificate" in result


def test_client_from_another_ca_is_refused(issued: Path, tmp_path: Path) -> None:
    other_ca, other_out = tmp_path / "other-ca", tmp_path / "other-out"
    assert run_cli("ca", "init", "--ca-dir", other_ca).returncode == 0
    assert run_cli("issue", "--ca-dir", other_ca, "--out", other_out).returncode == 0
    stranger = peer(other_out, FELIX, cn="calico-typha")
    stranger.ca = SetPaths(issued).bundle  # trusts our Typha, but is signed by another CA
    result = handshake(peer(issued, TYPHA, cn="calico-node"), stranger)
    assert result != "ok"
    assert "certificate verify failed" in result or "unknown ca" in result.lower()


# --- the seed guide's validation: openssl s_server -Verify and curl -------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def s_server(cert: Path, key: Path, ca: Path) -> Iterator[int]:
    """`openssl s_server -Verify 1 -www` with the given server pair, on loopback."""
    require("openssl")
    for _ in range(5):
        port = free_port()
        cmd = ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-cert", str(cert),
               "-key", str(key), "-CAfile", str(ca), "-Verify", "1", "-verify_return_error",
               "-www", "-naccept", "20"]  # fmt: skip
        proc = subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and proc.poll() is None:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            time.sleep(0.05)
        if proc.poll() is None:
            try:
                yield port
            finally:
                proc.kill()
                proc.wait()
            return
    raise AssertionError("openssl s_server did not start")


def curl(port: int, ca: Path, cert: Path | None = None, key: Path | None = None) -> tuple[int, str]:
    require("curl")
    # Typha's CN stands in for the hostname: curl falls back to the CN without DNS SANs.
    cmd = ["curl", "-sS", "--max-time", "10", "--resolve", f"calico-typha:{port}:127.0.0.1",
           "--cacert", str(ca), "-o", "/dev/null", "-w", "%{http_code}"]  # fmt: skip
    if cert and key:
        cmd += ["--cert", str(cert), "--key", str(key)]
    proc = subprocess.run(
        [*cmd, f"https://calico-typha:{port}/"], capture_output=True, text=True, timeout=30
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_seed_guide_s_server_and_curl(issued: Path) -> None:
    paths = SetPaths(issued)
    with s_server(paths.cert(TYPHA), paths.key(TYPHA), paths.bundle) as port:
        code, output = curl(port, paths.bundle)
        assert code != 0 and "certificate required" in output, output
        code, output = curl(port, paths.bundle, paths.cert(FELIX), paths.key(FELIX))
        assert (code, output) == (0, "200")
        # Typha's own certificate offered as a client: wrong EKU, refused by s_server.
        code, output = curl(port, paths.bundle, paths.cert(TYPHA), paths.key(TYPHA))
        assert code != 0 and "unsupported certificate" in output, output


def test_seed_guide_felix_certificate_as_server_is_refused_by_curl(issued: Path) -> None:
    paths = SetPaths(issued)
    with s_server(paths.cert(FELIX), paths.key(FELIX), paths.bundle) as port:
        code, output = curl(port, paths.bundle, paths.cert(FELIX), paths.key(FELIX))
        # Without the EKU problem curl would fail on the hostname instead (CN calico-node).
        assert code == 60 and "unsuitable certificate purpose" in output, output
