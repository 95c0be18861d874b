"""typhapki's certificates against Go peers that verify exactly like Typha and Felix.

The peers (tests/peers, docs/interop.md) reproduce Calico's TLS configuration with Go's
crypto/tls and crypto/x509, which are what Typha and Felix run. Every refusal is asserted
on the Go error text each side logs, so a profile change that Go would judge differently
fails here.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509

from tests.conftest import run_cli
from tests.support import gopeers
from tests.support.gopeers import (
    GoPeers,
    exchange,
    felix_env,
    run_felix,
    typha_env,
    typha_server,
)
from tests.support.issuing import ensure_local
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.profiles import (
    PrivateKey,
    build_leaf,
    cert_pem,
    generate_key,
    key_pem,
)
from typhapki.pki.settings import (
    DEFAULT_FELIX_CN,
    DEFAULT_TYPHA_CN,
    Identity,
    KeyType,
    PkiSettings,
    RoleName,
)
from typhapki.pki.x509compat import load_pem_certificates, valid_until

# The session-wide build of the peers, as a fixture of this module.
go_peers = gopeers.go_peers

BOTH = [RoleName.TYPHA, RoleName.FELIX]
INCOMPATIBLE_KEY_USAGE = "x509: certificate specifies an incompatible key usage"
BAD_CERTIFICATE = "remote error: tls: bad certificate"
# What Felix hears when Typha refuses its certificate: trixie's Go (1.24) names the
# reason in its alert, where bookworm's (1.19) says "bad certificate" for all. The
# verdict (refused, by Typha) is ours; the alert's name is Go's.
NO_CLIENT_CERTIFICATE = {BAD_CERTIFICATE, "remote error: tls: certificate required"}
EXPIRED_CLIENT_CERTIFICATE = {BAD_CERTIFICATE, "remote error: tls: expired certificate"}
UNKNOWN_AUTHORITY = "x509: certificate signed by unknown authority"
EXPIRED = "x509: certificate has expired or is not yet valid"

# Refusals must read the same whether TLS 1.3 (Calico's default) or 1.2 is negotiated:
# with 1.3 Typha's verdict on the client reaches Felix only after its handshake.
TLS_VERSIONS = pytest.mark.parametrize("max_version", ["1.3", "1.2"])


def write_pair(directory: Path, name: str, cert: x509.Certificate, key: PrivateKey) -> Path:
    """Write NAME.crt / NAME.key (mode 0600) and return the certificate's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{name}.crt").write_bytes(cert_pem(cert))
    key_path = directory / f"{name}.key"
    key_path.touch(mode=0o600)
    key_path.write_bytes(key_pem(key))
    return directory / f"{name}.crt"


# -- the sets typhapki issues are accepted ---------------------------------------------


@pytest.mark.parametrize("key_type", [k.value for k in KeyType])
def test_issued_set_completes_mutual_tls_for_every_key_type(
    go_peers: GoPeers, tmp_path: Path, key_type: str
) -> None:
    ca, out = tmp_path / "ca", tmp_path / "out"
    result = run_cli("ca", "init", "--ca-dir", ca, "--key-type", key_type)
    assert result.returncode == 0, result.stderr
    result = run_cli("issue", "--ca-dir", ca, "--out", out, "--key-type", key_type)
    assert result.returncode == 0, result.stderr

    # Calico's defaults negotiate TLS 1.3.
    ex = exchange(go_peers, typha_env(out), felix_env(out))
    assert ex.accepted, ex.describe()
    assert ex.felix.stdout.startswith(f'ok cn="{DEFAULT_TYPHA_CN}" '), ex.felix.stdout
    assert ex.typha.lines[0].startswith(f'conn 1 ok cn="{DEFAULT_FELIX_CN}" '), ex.typha.lines
    assert "version=TLS1.3" in ex.typha.lines[0]

    # TLS 1.2 (FIPS builds capped it there) picks the ECDHE suite matching Typha's key
    # from Calico's list: the key type must be one the list can serve.
    ex12 = exchange(go_peers, typha_env(out), felix_env(out), ["-max-version", "1.2"])
    assert ex12.accepted, ex12.describe()
    suite = "ECDHE_RSA" if key_type.startswith("rsa") else "ECDHE_ECDSA"
    assert "version=TLS1.2" in ex12.typha.lines[0]
    assert f"cipher=TLS_{suite}_WITH_" in ex12.typha.lines[0], ex12.typha.lines


def test_uri_san_only_identities_are_accepted(
    go_peers: GoPeers, tmp_path: Path, ca_dir: Path
) -> None:
    out = tmp_path / "out"
    typha_uri, felix_uri = "spiffe://cluster.local/typha", "spiffe://cluster.local/calico-node"
    result = run_cli(
        "issue",
        "--ca-dir",
        ca_dir,
        "--out",
        out,
        "--typha-uri-san",
        typha_uri,
        "--felix-uri-san",
        felix_uri,
    )
    assert result.returncode == 0, result.stderr

    ex = exchange(
        go_peers,
        typha_env(out, client_cn=None, client_uri_san=felix_uri),
        felix_env(out, typha_cn=None, typha_uri_san=typha_uri),
    )
    assert ex.accepted, ex.describe()
    # No CN at all: the URI SAN alone identifies each side.
    assert ex.typha.lines[0].startswith(f'conn 1 ok cn="" uris={felix_uri} '), ex.typha.lines
    assert ex.felix.stdout.startswith(f'ok cn="" uris={typha_uri} '), ex.felix.stdout

    # Another URI, or a CN check against a URI-only certificate, is refused.
    wrong_uri = exchange(
        go_peers,
        typha_env(out, client_cn=None, client_uri_san="spiffe://cluster.local/other"),
        felix_env(out, typha_cn=None, typha_uri_san=typha_uri),
    )
    assert not wrong_uri.accepted, wrong_uri.describe()
    assert wrong_uri.typha_error == "peer certificate does not have required URI SAN"
    cn_check = exchange(
        go_peers, typha_env(out), felix_env(out, typha_cn=None, typha_uri_san=typha_uri)
    )
    assert not cn_check.accepted, cn_check.describe()
    assert cn_check.typha_error == "peer certificate does not have required CN"


def test_cn_or_uri_san_either_match_is_enough(go_peers: GoPeers, tmp_path: Path) -> None:
    # typha/pkg/tlsutils: with both configured, one match suffices; with neither, the
    # error names both.
    out = tmp_path / "out"
    ca = tmp_path / "ca"
    init_ca(ca, KeyType.ECDSA_P256, 3650, None, force=False)
    felix_uri = "spiffe://cluster.local/calico-node"
    settings = PkiSettings(felix=Identity(DEFAULT_FELIX_CN, felix_uri))
    ensure_local(out, load_issuer(ca), settings, BOTH)

    only_uri = exchange(
        go_peers, typha_env(out, client_cn="nobody", client_uri_san=felix_uri), felix_env(out)
    )
    assert only_uri.accepted, only_uri.describe()
    neither = exchange(
        go_peers,
        typha_env(out, client_cn="nobody", client_uri_san="spiffe://cluster.local/x"),
        felix_env(out),
    )
    assert not neither.accepted, neither.describe()
    assert neither.typha_error == "peer certificate does not have required CN or URI SAN"


# -- what Typha and Felix refuse ----------------------------------------------------------


@TLS_VERSIONS
def test_felix_certificate_as_typha_server_is_refused_by_felix(
    go_peers: GoPeers, issued: Path, max_version: str
) -> None:
    paths = SetPaths(issued)
    typha = {
        **typha_env(issued),
        "TYPHA_SERVERCERTFILE": str(paths.cert(RoleName.FELIX)),
        "TYPHA_SERVERKEYFILE": str(paths.key(RoleName.FELIX)),
    }
    ex = exchange(
        go_peers, typha, felix_env(issued, typha_cn=DEFAULT_FELIX_CN), ["-max-version", max_version]
    )
    assert not ex.accepted, ex.describe()
    # Felix verifies the chain itself with the default usage serverAuth.
    assert ex.felix.returncode == 1
    assert ex.felix_error == INCOMPATIBLE_KEY_USAGE
    assert ex.typha_error == BAD_CERTIFICATE


@TLS_VERSIONS
def test_typha_certificate_as_felix_client_is_refused_by_typha(
    go_peers: GoPeers, issued: Path, max_version: str
) -> None:
    paths = SetPaths(issued)
    felix = {
        **felix_env(issued),
        "FELIX_TYPHACERTFILE": str(paths.cert(RoleName.TYPHA)),
        "FELIX_TYPHAKEYFILE": str(paths.key(RoleName.TYPHA)),
    }
    ex = exchange(
        go_peers,
        typha_env(issued, client_cn=DEFAULT_TYPHA_CN),
        felix,
        ["-max-version", max_version],
    )
    assert not ex.accepted, ex.describe()
    # crypto/tls verifies client chains with usage clientAuth before Calico's verifier.
    assert ex.typha_error.endswith(INCOMPATIBLE_KEY_USAGE), ex.typha_error
    assert ex.felix_error == BAD_CERTIFICATE


@TLS_VERSIONS
@pytest.mark.parametrize("wrong_cn", ["calico-node-x", "Calico-Node", "calico"])
def test_wrong_cn_is_refused_by_typha(
    go_peers: GoPeers, issued: Path, wrong_cn: str, max_version: str
) -> None:
    ex = exchange(
        go_peers,
        typha_env(issued, client_cn=wrong_cn),
        felix_env(issued),
        ["-max-version", max_version],
    )
    assert not ex.accepted, ex.describe()
    assert ex.typha_error == "peer certificate does not have required CN"
    assert ex.felix_error == BAD_CERTIFICATE


@TLS_VERSIONS
def test_wrong_typha_cn_is_refused_by_felix(
    go_peers: GoPeers, issued: Path, max_version: str
) -> None:
    ex = exchange(
        go_peers,
        typha_env(issued),
        felix_env(issued, typha_cn="calico-typha-x"),
        ["-max-version", max_version],
    )
    assert not ex.accepted, ex.describe()
    assert ex.felix_error == "peer certificate does not have required CN"
    assert ex.typha_error == BAD_CERTIFICATE


def test_client_certificate_from_another_ca_is_refused(
    go_peers: GoPeers, tmp_path: Path, issued: Path
) -> None:
    other_ca = tmp_path / "other-ca"
    init_ca(other_ca, KeyType.ECDSA_P256, 3650, None, force=False)
    other = tmp_path / "other"
    ensure_local(other, load_issuer(other_ca), PkiSettings(), BOTH)
    felix = {
        **felix_env(issued),
        "FELIX_TYPHACERTFILE": str(SetPaths(other).cert(RoleName.FELIX)),
        "FELIX_TYPHAKEYFILE": str(SetPaths(other).key(RoleName.FELIX)),
    }

    # Go's client withholds a certificate whose issuer Typha's CA list does not name.
    ex = exchange(go_peers, typha_env(issued), felix)
    assert not ex.accepted, ex.describe()
    assert ex.typha_error == "tls: client didn't provide a certificate"
    assert ex.felix_error in NO_CLIENT_CERTIFICATE, ex.felix_error

    # Presented anyway, Typha's own chain verification refuses it.
    forced = exchange(go_peers, typha_env(issued), felix, ["-force-client-cert"])
    assert not forced.accepted, forced.describe()
    assert forced.typha_error.endswith(UNKNOWN_AUTHORITY), forced.typha_error

    # And Felix refuses a Typha certificate from another CA.
    typha = {
        **typha_env(issued),
        "TYPHA_SERVERCERTFILE": str(SetPaths(other).cert(RoleName.TYPHA)),
        "TYPHA_SERVERKEYFILE": str(SetPaths(other).key(RoleName.TYPHA)),
    }
    server_side = exchange(go_peers, typha, felix_env(issued))
    assert not server_side.accepted, server_side.describe()
    assert server_side.felix_error == UNKNOWN_AUTHORITY
    assert server_side.typha_error == BAD_CERTIFICATE


@pytest.mark.parametrize("role", [RoleName.TYPHA, RoleName.FELIX])
def test_expired_leaf_is_refused(
    go_peers: GoPeers, tmp_path: Path, ca_dir: Path, issued: Path, role: RoleName
) -> None:
    issuer = load_issuer(ca_dir)
    now = datetime.now(UTC)
    key = generate_key(KeyType.ECDSA_P256)
    identity = Identity(DEFAULT_TYPHA_CN if role is RoleName.TYPHA else DEFAULT_FELIX_CN, None)
    # Valid for the few minutes the CA's own backdating allows, over a minute ago.
    expired = build_leaf(issuer, key, role, identity, not_after=now - timedelta(minutes=1), now=now)
    assert valid_until(expired) < now
    cert = write_pair(tmp_path / "expired", role.value, expired, key)
    key_path = cert.with_suffix(".key")

    typha, felix = typha_env(issued), felix_env(issued)
    if role is RoleName.TYPHA:
        typha |= {"TYPHA_SERVERCERTFILE": str(cert), "TYPHA_SERVERKEYFILE": str(key_path)}
    else:
        felix |= {"FELIX_TYPHACERTFILE": str(cert), "FELIX_TYPHAKEYFILE": str(key_path)}
    ex = exchange(go_peers, typha, felix)
    assert not ex.accepted, ex.describe()
    if role is RoleName.TYPHA:
        assert ex.felix_error.startswith(EXPIRED), ex.felix_error
        assert ex.typha_error == BAD_CERTIFICATE
    else:
        assert EXPIRED in ex.typha_error, ex.typha_error
        assert ex.felix_error in EXPIRED_CLIENT_CERTIFICATE, ex.felix_error


def test_the_peers_clock_option_moves_go_verification(go_peers: GoPeers, issued: Path) -> None:
    """`-now` on both peers: a valid set verified one leaf lifetime later is refused as
    expired by each side, and verified before it was issued, as not yet valid. This is
    how tests move Go's clock (faketime cannot: Go reads it through the vDSO)."""
    leaf = load_pem_certificates(SetPaths(issued).cert(RoleName.FELIX).read_bytes())[0]
    now = datetime.now(UTC)
    when = {
        "now": now,
        "after expiry": valid_until(leaf) + timedelta(hours=1),
        "before issuance": now - timedelta(days=1),
    }
    for name, at in when.items():
        stamp = ["-now", at.strftime("%Y-%m-%dT%H:%M:%SZ")]
        # One side's clock at a time: each refuses the other's leaf on its own.
        felix_late = exchange(go_peers, typha_env(issued), felix_env(issued), stamp, ())
        typha_late = exchange(go_peers, typha_env(issued), felix_env(issued), (), stamp)
        if name == "now":
            assert felix_late.accepted and typha_late.accepted, felix_late.describe()
            continue
        assert felix_late.felix_error.startswith(EXPIRED), (name, felix_late.describe())
        assert EXPIRED in typha_late.typha_error, (name, typha_late.describe())


# Calico's release decides whether the TLS policy variables mean anything:
# TLS_CIPHER_SUITES is read since 3.31, TLS_MIN_VERSION since 3.32 (docs/kubernetes.md).
RELEASES = {"3.30": (False, False), "3.31.2": (True, False), "3.32": (True, True), "": (True, True)}


@pytest.mark.parametrize("release", list(RELEASES))
def test_the_peers_play_calico_releases_that_ignore_the_tls_policy(
    go_peers: GoPeers, issued: Path, release: str
) -> None:
    """`-calico-version` on the Typha peer: a release before 3.32 accepts a TLS 1.2
    Felix under TLS_MIN_VERSION=1.3, one before 3.31 a suite outside TLS_CIPHER_SUITES;
    the newest (no flag, as every other test runs it) enforces both."""
    ciphers, min_version = RELEASES[release]
    version = ("-calico-version", release) if release else ()
    typha = {**typha_env(issued), "TLS_MIN_VERSION": "1.3"}
    old_felix = exchange(go_peers, typha, felix_env(issued), ("-max-version", "1.2"), version)
    assert old_felix.accepted is not min_version, old_felix.describe()
    if min_version:
        assert "protocol version" in old_felix.felix_error, old_felix.describe()
    else:
        assert "version=TLS1.2" in old_felix.typha.lines[0]
    typha = {**typha_env(issued), "TLS_CIPHER_SUITES": "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"}
    felix = {**felix_env(issued), "TLS_CIPHER_SUITES": "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"}
    other_suite = exchange(go_peers, typha, felix, ("-max-version", "1.2"), version)
    assert other_suite.accepted is not ciphers, other_suite.describe()
    if not ciphers:
        assert "cipher=TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" in other_suite.typha.lines[0]


def test_the_peers_refuse_a_release_they_cannot_read(go_peers: GoPeers, issued: Path) -> None:
    args = ("-calico-version", "three")
    with (
        pytest.raises(pytest.fail.Exception, match="calico-version"),
        typha_server(go_peers, typha_env(issued), args=args),
    ):
        pass


# -- CA rotation: one bundle, two CAs ----------------------------------------------------


def test_rotation_bundle_accepts_leaves_from_either_ca(
    go_peers: GoPeers, tmp_path: Path, ca_dir: Path
) -> None:
    old = load_issuer(ca_dir)
    new_ca = tmp_path / "new-ca"
    init_ca(new_ca, KeyType.ECDSA_P384, 3650, None, force=False)
    new = load_issuer(new_ca)
    # Each node's set is signed by one CA but trusts both: the overlap of a rotation.
    sets = {
        "old": tmp_path / "set-old",
        "new": tmp_path / "set-new",
    }
    ensure_local(sets["old"], old, PkiSettings(), BOTH, trusted=[new.cert])
    ensure_local(sets["new"], new, PkiSettings(), BOTH, trusted=[old.cert])
    for out in sets.values():
        bundle = load_pem_certificates(SetPaths(out).bundle.read_bytes())
        assert {c.subject for c in bundle} == {old.cert.subject, new.cert.subject}

    for typha_from, out in sets.items():
        # One Typha, a Felix from each CA connecting to it.
        with typha_server(go_peers, typha_env(out), conns=2) as server:
            felixes = {
                name: run_felix(go_peers, server.port, felix_env(o)) for name, o in sets.items()
            }
            result = server.finish()
        for felix_from, felix in felixes.items():
            assert felix.ok, (typha_from, felix_from, felix)
        assert result.returncode == 0, (typha_from, result)
        assert [ln.split(" ", 3)[2] for ln in result.lines] == ["ok", "ok"], result.lines

    # A Typha still on the old bundle (new CA not yet rolled out) refuses new leaves:
    # why the bundle must reach every node before any leaf from the new CA is used.
    stale = tmp_path / "stale"
    ensure_local(stale, old, PkiSettings(), BOTH)
    ex = exchange(go_peers, typha_env(stale), felix_env(sets["new"]))
    assert not ex.accepted, ex.describe()
    assert ex.typha_error == "tls: client didn't provide a certificate"
    # Likewise a Felix on the old bundle refuses a Typha leaf from the new CA.
    ex = exchange(go_peers, typha_env(sets["new"]), felix_env(stale))
    assert not ex.accepted, ex.describe()
    assert ex.felix_error == UNKNOWN_AUTHORITY
