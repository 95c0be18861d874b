"""`typhapki probe` against real TLS servers that verify the way Typha does.

The Go typhaserver (tests/peers) loads its certificate once at start, like Typha: after
a reissue it keeps serving the old one until restarted, which is the drift the probe
exists to see. openssl s_server -Verify is a second, independent server.
"""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, require, run_cli
from tests.support import gopeers
from tests.support import multirootca as multirootca_support
from tests.support.cfssl import write_auth_key
from tests.support.gopeers import GoPeers, typha_env, typha_server
from tests.support.issuing import ensure_local
from tests.support.mtlspeers import go_typha
from tests.support.multirootca import Multirootca
from typhapki.errors import UsageError
from typhapki.firewall.mtls_probe import prove
from typhapki.firewall.mtls_proof import ENFORCED
from typhapki.monitoring.probe import ProbeResult, parse_address, probe
from typhapki.pki import felix_tls
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import Identity, KeyType, PkiSettings, RoleName
from typhapki.pki.verify import fingerprint

go_peers = gopeers.go_peers
multirootca = multirootca_support.multirootca
TYPHA = Identity("calico-typha", None)


def _typha_fp(out: Path) -> str:
    return fingerprint(load_certs(SetPaths(out).cert(RoleName.TYPHA), "typha")[0])


def _reissue_typha(out: Path, ca_dir: Path) -> None:
    settings = PkiSettings(key_type=KeyType.ECDSA_P384)  # another key type: a new leaf
    assert ensure_local(out, load_issuer(ca_dir), settings, [RoleName.TYPHA])


def test_drift_after_reissue_until_typha_restarts(
    go_peers: GoPeers, issued: Path, ca_dir: Path
) -> None:
    old_fp = _typha_fp(issued)
    with typha_server(go_peers, typha_env(issued), conns=2) as server:
        address = f"127.0.0.1:{server.port}"
        result = run_cli("probe", "--address", address, "--out", issued)
        assert result.returncode == 0, (result.stdout, result.stderr)
        assert old_fp in result.stdout and "the certificate on disk" in result.stdout

        _reissue_typha(issued, ca_dir)
        new_fp = _typha_fp(issued)
        assert new_fp != old_fp
        drift = run_cli("probe", "--address", address, "--out", issued)
        assert drift.returncode == 1, (drift.stdout, drift.stderr)
        assert "DRIFT" in drift.stdout and old_fp in drift.stdout and new_fp in drift.stdout
        assert "restart Typha" in drift.stdout
        server.finish()

    with typha_server(go_peers, typha_env(issued)) as restarted:
        after = run_cli("probe", "--address", f"127.0.0.1:{restarted.port}", "--out", issued)
        assert after.returncode == 0, (after.stdout, after.stderr)
        assert new_fp in after.stdout
        restarted.finish()


def test_json_output(go_peers: GoPeers, issued: Path) -> None:
    with typha_server(go_peers, typha_env(issued)) as server:
        result = run_cli(
            "probe", "--address", f"127.0.0.1:{server.port}", "--out", issued, "--json"
        )
        server.finish()
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["accepted"] is True and data["serves_disk_certificate"] is True
    assert data["served"] == data["disk"]
    assert data["served"]["sha256_fingerprint"] == _typha_fp(issued)


def test_typha_refusing_the_felix_certificate_is_loud(go_peers: GoPeers, issued: Path) -> None:
    env = typha_env(issued, client_cn="someone-else")
    with typha_server(go_peers, env) as server:
        result = run_cli("probe", "--address", f"127.0.0.1:{server.port}", "--out", issued)
        typha = server.finish()
    assert typha.returncode == 1  # Typha really refused the connection
    assert_one_line_error(result, 1, "refused this node's Felix certificate", "failed")
    # What Typha served is still named: an operator sees which certificate was involved.
    assert _typha_fp(issued) in result.stderr


def test_felix_refusing_typha_is_loud(go_peers: GoPeers, issued: Path, tmp_path: Path) -> None:
    """A Typha certificate from a CA the node does not trust: Felix would hang up."""
    other_ca = tmp_path / "other-ca"
    init_ca(other_ca, KeyType.ECDSA_P256, 3650, None, force=False)
    other = tmp_path / "other"
    ensure_local(other, load_issuer(other_ca), PkiSettings(), [RoleName.TYPHA, RoleName.FELIX])
    env = typha_env(other)
    env["TYPHA_CAFILE"] = str(SetPaths(issued).bundle)  # Typha would accept our Felix
    # Two connections: the verifying one, then one that only fetches what is served.
    with typha_server(go_peers, env, conns=2) as server:
        result = run_cli("probe", "--address", f"127.0.0.1:{server.port}", "--out", issued)
        server.finish()
    assert_one_line_error(result, 1, "Felix would refuse Typha's certificate")
    assert _typha_fp(other) in result.stderr


def test_wrong_typha_identity_is_reported(go_peers: GoPeers, issued: Path) -> None:
    with typha_server(go_peers, typha_env(issued)) as server:
        result = run_cli(
            "probe",
            "--address",
            f"127.0.0.1:{server.port}",
            "--out",
            issued,
            "--typha-cn",
            "typha-elsewhere",
        )
        server.finish()
    assert_one_line_error(result, 1, "Felix would refuse Typha's identity", "typha-elsewhere")


def test_nothing_listening(issued: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    result = run_cli("probe", "--address", f"127.0.0.1:{port}", "--out", issued)
    assert_one_line_error(result, 1, "nothing listens", "is Typha running")


def test_usage_errors_exit_2(issued: Path) -> None:
    assert_one_line_error(run_cli("probe", "--address", "a:b:c", "--out", issued), 2, "a:b:c")


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=30))
def test_address_parsing_never_crashes(text: str) -> None:
    try:
        host, port = parse_address(text)
    except UsageError:
        return
    assert host and 0 < port < 65536


@contextmanager
def _openssl_server(out: Path, client_cas: Path) -> Iterator[str]:
    """openssl s_server serving out's Typha set, requiring a client certificate."""
    require("openssl")
    paths = SetPaths(out)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        ["openssl", "s_server", "-accept", f"127.0.0.1:{port}", "-naccept", "1",
         "-cert", str(paths.cert(RoleName.TYPHA)), "-key", str(paths.key(RoleName.TYPHA)),
         "-CAfile", str(client_cas), "-Verify", "2", "-verify_return_error", "-quiet"],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield f"127.0.0.1:{port}"
    finally:
        proc.kill()
        proc.communicate()


def _probe_when_up(address: str, out: Path) -> ProbeResult:
    # s_server accepts once: wait for it by probing, not by a separate connection.
    deadline = time.monotonic() + 20
    while True:
        result = probe(address, out, TYPHA)
        if "nothing listens" not in (result.error or "") or time.monotonic() > deadline:
            return result
        time.sleep(0.05)


def test_openssl_server_accepting_the_felix_certificate(issued: Path) -> None:
    with _openssl_server(issued, SetPaths(issued).bundle) as address:
        result = _probe_when_up(address, issued)
    assert result.accepted and result.serves_disk, result


def test_openssl_server_refusing_the_felix_certificate(issued: Path, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca"
    init_ca(other_ca, KeyType.ECDSA_P256, 3650, None, force=False)
    with _openssl_server(issued, other_ca / "typhaca.crt") as address:
        result = _probe_when_up(address, issued)
    assert not result.accepted and not result.serves_disk
    assert result.error is not None and "refused" in result.error, result


@contextmanager
def _closing_typha(out: Path) -> Iterator[str]:
    """A TLS server with Typha's certificate that requires a client certificate from the
    bundle, then closes without an alert: what a Typha shutting down or shedding
    connections does, and what the probe cannot tell from an identity refusal."""
    paths = SetPaths(out)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(paths.cert(RoleName.TYPHA), paths.key(RoleName.TYPHA))
    ctx.load_verify_locations(paths.bundle)
    ctx.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = listener.accept()
        with ctx.wrap_socket(conn, server_side=True):
            pass  # handshake done, then a clean close

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{listener.getsockname()[1]}"
    finally:
        thread.join(10)
        listener.close()


def test_a_close_after_the_handshake_blames_the_identity_only_when_known(issued: Path) -> None:
    with _closing_typha(issued) as address:
        unknown = probe(address, issued, TYPHA, felix_identity=Identity("calico-node", None))
    assert not unknown.accepted and unknown.error is not None
    assert "without saying why" in unknown.error and "shutting down" in unknown.error
    assert "CN 'calico-node'" in unknown.error and "reissue" not in unknown.error

    with _closing_typha(issued) as address:
        known = probe(address, issued, TYPHA, felix_identity=Identity("calico-node-2", None))
    assert not known.accepted and known.error is not None
    assert "is not the cluster's Felix identity CN=calico-node-2" in known.error
    assert "without saying why" not in known.error and "reissue the Felix set" in known.error
    # Either name suffices for Typha: a matching CN with a URI SAN the set lacks is
    # not known to be refused.
    with _closing_typha(issued) as address:
        felix = Identity("calico-node", "spiffe://cluster.local/felix")
        either = probe(address, issued, TYPHA, felix_identity=felix)
    assert either.error is not None and "without saying why" in either.error


def test_a_bundle_anchored_at_an_intermediate_is_trusted_as_go_trusts_it(
    go_peers: GoPeers, multirootca: Multirootca, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cluster's bundle pins its intermediate, not the fleet's root: Felix (Go) trusts
    it as an anchor, and so must the probe (metrics and `check --nagios` use it) and
    the mTLS proof's Felix; OpenSSL needs VERIFY_X509_PARTIAL_CHAIN for that."""
    key = write_auth_key(tmp_path / "auth.key")
    node = tmp_path / "kube7301"
    label = multirootca_support.LABELS[0]
    issued = run_cli(
        "issue", "--out", node, "--signer", "cfssl", "--cfssl-url", multirootca.url,
        "--cfssl-auth-key", key, "--cfssl-label", label, "--node-name", node.name,
    )  # fmt: skip
    assert issued.returncode == 0, issued.stderr
    intermediate = load_certs(multirootca.ca_cert(label), "intermediate")[0]
    bundle = load_certs(SetPaths(node).bundle, "bundle")
    assert [fingerprint(c) for c in bundle] == [fingerprint(intermediate)]
    assert intermediate.issuer != intermediate.subject  # an anchor that is no root
    with go_typha(go_peers, node, "verify") as address:
        result = run_cli("probe", "--address", address, "--out", node)
        assert result.returncode == 0, (result.stdout, result.stderr)
        assert "the certificate on disk" in result.stdout
        assert prove(address, node, TYPHA, 2.0).verdict == ENFORCED
        nagios = run_cli("check", "--nagios", "--out", node, "--probe-address", address)
        assert nagios.returncode == 0 and "serves" not in nagios.stdout.split("|")[0], nagios
        metrics = run_cli("metrics", "--out", node, "--probe-address", address)
        assert 'typhapki_probe_success{cluster=""} 1.0' in metrics.stdout, metrics
        monkeypatch.setattr(felix_tls, "PARTIAL_CHAIN", ssl.VerifyFlags(0))
        without = probe(address, node, TYPHA)
    assert not without.accepted and "issuer" in (without.error or ""), without


@pytest.mark.parametrize("reset", [False, True])
def test_a_typha_that_sheds_felix_is_not_said_to_refuse_it(
    go_peers: GoPeers, issued: Path, reset: bool
) -> None:
    """A connection closed (or reset) before Typha answered fails the probe, exit 1, as
    a real Felix would fail; but the line says Typha closed or reset it, not that Typha
    refused this node's Felix (no alert said so)."""
    from tests.support.mtlspeers import shedding_typha

    with (
        go_typha(go_peers, issued, "verify") as typha,
        shedding_typha(typha, answered=0, reset=reset) as address,
    ):
        result = run_cli("probe", "--address", address, "--out", issued)
    words = "reset" if reset else "closed the connection during the handshake"
    assert_one_line_error(result, 1, "TLS handshake as this node's Felix failed", words)
    assert "refused" not in result.stderr
