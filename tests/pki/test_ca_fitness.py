"""CAs that Go would not accept a leaf from are neither used nor trusted (issue 8, class 8).

Each unfit CA is judged three ways: `issue` refuses to sign with it (exit 3, nothing
written), `check` calls a set it signed invalid (exit 1, naming why), and the Go peers
(Typha's and Felix's crypto/x509) refuse the handshake, so the verdicts agree.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import NameOID

from tests.conftest import assert_one_line_error, run_cli
from tests.support import der, gopeers
from tests.support.gopeers import GoPeers, exchange, felix_env, typha_env
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.profiles import ROLE_EKU, PrivateKey, cert_pem, generate_key, key_pem
from typhapki.pki.settings import DEFAULT_FELIX_CN, DEFAULT_TYPHA_CN, KeyType, RoleName
from typhapki.pki.store import FileSpec, publish

go_peers = gopeers.go_peers

SHA256 = hashes.SHA256()
CN = {RoleName.TYPHA: DEFAULT_TYPHA_CN, RoleName.FELIX: DEFAULT_FELIX_CN}


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def make_ca(
    key: PrivateKey, *, cert_sign: bool = True, algorithm: hashes.HashAlgorithm | None = None
) -> x509.Certificate:
    now = datetime.now(UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "unfit-ca")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(hours=1))
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_usage(cert_sign), critical=True)
        .sign(key, hashes.SHA256())
    )
    if isinstance(algorithm, hashes.SHA1):
        assert isinstance(key, rsa.RSAPrivateKey)
        return x509.load_der_x509_certificate(der.resigned_sha1(_der(cert), key))
    return cert


def _der(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.DER)


def make_leaf(
    ca: x509.Certificate, ca_key: PrivateKey, role: RoleName, algorithm: hashes.HashAlgorithm
) -> tuple[x509.Certificate, PrivateKey]:
    key = generate_key(KeyType.ECDSA_P256)
    now = datetime.now(UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CN[role])]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ROLE_EKU[role]]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    if isinstance(algorithm, hashes.SHA1):
        assert isinstance(ca_key, rsa.RSAPrivateKey)
        cert = x509.load_der_x509_certificate(der.resigned_sha1(_der(cert), ca_key))
    return cert, key


def write_ca(ca_dir: Path, cert: x509.Certificate, key: PrivateKey) -> None:
    publish(
        ca_dir,
        {"typhaca.crt": FileSpec(cert_pem(cert)), "typhaca.key": FileSpec(key_pem(key), 0o600)},
    )


def write_set(
    out: Path,
    ca: x509.Certificate,
    ca_key: PrivateKey,
    algorithm: hashes.HashAlgorithm = SHA256,
) -> None:
    paths = SetPaths(out)
    publish(paths.bundle_dir, {paths.bundle.name: FileSpec(cert_pem(ca))})
    for role in RoleName:
        cert, key = make_leaf(ca, ca_key, role, algorithm)
        publish(
            paths.role_dir(role),
            {
                paths.cert(role).name: FileSpec(cert_pem(cert)),
                paths.key(role).name: FileSpec(key_pem(key), 0o600),
            },
        )


def _ec() -> PrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _rsa(bits: int) -> PrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def unfit_ca(case: str) -> tuple[x509.Certificate, PrivateKey, str]:
    """An unfit CA, its key, and the word the refusal must contain."""
    if case == "no keyCertSign":
        key = _ec()
        return make_ca(key, cert_sign=False), key, "keyCertSign"
    if case == "SHA-1 self-signature":
        key = _rsa(2048)
        return make_ca(key, algorithm=hashes.SHA1()), key, "SHA1"
    key = _rsa(1024)
    return make_ca(key), key, "1024 bits"


UNFIT = ["no keyCertSign", "SHA-1 self-signature", "RSA-1024"]


@pytest.mark.parametrize("case", sorted(UNFIT))
def test_unfit_ca_is_refused_by_issue_and_its_set_fails_check(tmp_path: Path, case: str) -> None:
    ca, key, needle = unfit_ca(case)
    ca_dir = tmp_path / "ca"
    write_ca(ca_dir, ca, key)
    out = tmp_path / "out"
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", out)
    assert_one_line_error(result, 3, str(CaPaths(ca_dir).cert), needle)
    assert not out.exists()

    write_set(out, ca, key)
    check = run_cli("check", "--out", out)
    assert check.returncode == 1
    assert needle in check.stdout, check.stdout
    # With the CA to issue from, check says what issue would: refused (3), as one line.
    with_ca = run_cli("check", "--out", out, "--ca-dir", ca_dir)
    assert_one_line_error(with_ca, 3, str(CaPaths(ca_dir).cert), needle)
    # As a CA to keep trusting during a rotation: refused as well.
    trusted = run_cli("check", "--out", out, "--trust", CaPaths(ca_dir).cert, "--ca-dir", ca_dir)
    assert trusted.returncode in (2, 3)


def test_go_refuses_what_check_refuses(go_peers: GoPeers, tmp_path: Path) -> None:
    """A CA without keyCertSign, and SHA-1 leaves: Go and `check` agree (both refuse)."""
    key = _ec()
    no_sign = make_ca(key, cert_sign=False)
    out = tmp_path / "no-sign"
    write_set(out, no_sign, key)
    ex = exchange(go_peers, typha_env(out), felix_env(out))
    assert not ex.accepted, ex.describe()
    assert "keyCertSign" in run_cli("check", "--out", out).stdout

    rsa_key = _rsa(2048)
    fine = make_ca(rsa_key)
    sha1 = tmp_path / "sha1"
    write_set(sha1, fine, rsa_key, hashes.SHA1())
    ex = exchange(go_peers, typha_env(sha1), felix_env(sha1))
    assert not ex.accepted, ex.describe()
    assert "insecure algorithm" in ex.describe() or "SHA1" in ex.describe(), ex.describe()
    check = run_cli("check", "--out", sha1)
    assert check.returncode == 1 and "signed with SHA1, which Go refuses" in check.stdout

    # The control: the same construction with a fit CA and SHA-256 is accepted by both.
    good = tmp_path / "good"
    write_set(good, fine, rsa_key)
    ex = exchange(go_peers, typha_env(good), felix_env(good))
    assert ex.accepted, ex.describe()
    assert run_cli("check", "--out", good).returncode == 0
