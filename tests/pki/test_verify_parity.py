"""Acceptance parity: what `check` accepts, Go (Typha, Felix) and OpenSSL accept.

Issue 19, class 2.

Generated sets (CA EKUs, unhandled critical extensions on the CA or a leaf, a CA not
valid yet, an intermediate pinned as the trust anchor, weak CA keys) go through three
judges: `check` as a process, the Go peers in a real mutual-TLS exchange
(tests/peers), and `openssl verify` run as a TLS peer would run it: `-partial_chain`
(a bundle that pins an intermediate is a trust anchor for Go) and the role's
`-purpose` (without it openssl ignores EKUs). `check` may be stricter than both; it
must never accept what either refuses.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import against_servers, require, run_cli
from tests.support import gopeers
from tests.support.gopeers import GoPeers, exchange, felix_env, typha_env
from typhapki.pki.layout import SetPaths
from typhapki.pki.profiles import ROLE_EKU, PrivateKey, cert_pem, generate_key, key_pem
from typhapki.pki.settings import DEFAULT_FELIX_CN, DEFAULT_TYPHA_CN, KeyType, RoleName
from typhapki.pki.store import FileSpec, publish

go_peers = gopeers.go_peers

CN = {RoleName.TYPHA: DEFAULT_TYPHA_CN, RoleName.FELIX: DEFAULT_FELIX_CN}
PURPOSE = {RoleName.TYPHA: "sslserver", RoleName.FELIX: "sslclient"}
EKUS = {
    "serverAuth": ExtendedKeyUsageOID.SERVER_AUTH,
    "clientAuth": ExtendedKeyUsageOID.CLIENT_AUTH,
    "any": ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE,
    "codeSigning": ExtendedKeyUsageOID.CODE_SIGNING,
}
UNKNOWN = x509.ObjectIdentifier("1.3.6.1.4.1.55555.1.1")  # no one handles it
POLICY_CONSTRAINTS = x509.PolicyConstraints(require_explicit_policy=None, inhibit_policy_mapping=0)


@dataclass(frozen=True)
class Case:
    ca_eku: tuple[str, ...] | None  # on the CA that signs the leaves (the pinned one)
    critical: str | None  # an extension marked critical (see _critical), on ...
    critical_on: str  # ... "ca", "typha" or "felix"
    ca_not_yet_valid: bool
    intermediate: bool  # leaves signed by an intermediate; the bundle pins only it
    ca_key: str  # "ec", "rsa2048", "rsa1024"


CASES = st.builds(
    Case,
    ca_eku=st.none()
    | st.lists(st.sampled_from(sorted(EKUS)), min_size=1, max_size=2, unique=True).map(tuple),
    critical=st.sampled_from(
        [
            None,
            None,
            "unknown",
            "policy constraints",
            "authority key identifier",
            "name constraints",
        ]
    ),
    critical_on=st.sampled_from(["ca", "typha", "felix"]),
    ca_not_yet_valid=st.booleans(),
    intermediate=st.booleans(),
    ca_key=st.sampled_from(["ec", "ec", "rsa2048", "rsa1024"]),
)


def _key(kind: str) -> PrivateKey:
    if kind == "ec":
        return ec.generate_private_key(ec.SECP256R1())
    return rsa.generate_private_key(public_exponent=65537, key_size=int(kind.removeprefix("rsa")))


def _usage(ca: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not ca, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=ca, crl_sign=ca,
        encipher_only=False, decipher_only=False,
    )  # fmt: skip


def _critical(builder: x509.CertificateBuilder, case: Case, on: str) -> x509.CertificateBuilder:
    if case.critical is None or case.critical_on != on:
        return builder
    if case.critical == "unknown":
        return builder.add_extension(x509.UnrecognizedExtension(UNKNOWN, b"\x05\x00"), True)
    if case.critical == "authority key identifier":
        aki = x509.AuthorityKeyIdentifier(b"\x01" * 20, None, None)
        return builder.add_extension(aki, critical=True)
    if case.critical == "name constraints":
        allowed = [x509.DNSName("example.org")]
        return builder.add_extension(x509.NameConstraints(allowed, None), critical=True)
    return builder.add_extension(POLICY_CONSTRAINTS, critical=True)


def _ca(
    name: str,
    key: PrivateKey,
    issuer: tuple[x509.Name, PrivateKey] | None,
    case: Case,
    pinned: bool,
) -> x509.Certificate:
    now = datetime.now(UTC)
    start = (
        now + timedelta(days=1) if pinned and case.ca_not_yet_valid else now - timedelta(hours=1)
    )
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(now + timedelta(days=365))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_usage(True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
    )
    if pinned:
        if case.ca_eku is not None:
            builder = builder.add_extension(
                x509.ExtendedKeyUsage([EKUS[e] for e in case.ca_eku]), critical=False
            )
        builder = _critical(builder, case, "ca")
    return builder.sign(issuer_key, hashes.SHA256())


def build_set(out: Path, case: Case) -> None:
    """Publish the case's set under `out` as typhapki lays it out."""
    ca_key = _key(case.ca_key)
    if case.intermediate:
        root_key = _key("ec")
        root = _ca("parity-root", root_key, None, case, pinned=False)
        ca = _ca("parity-intermediate", ca_key, (root.subject, root_key), case, pinned=True)
    else:
        ca = _ca("parity-ca", ca_key, None, case, pinned=True)
    paths = SetPaths(out)
    publish(paths.bundle_dir, {paths.bundle.name: FileSpec(cert_pem(ca))})
    now = datetime.now(UTC)
    for role in RoleName:
        key = generate_key(KeyType.ECDSA_P256)
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CN[role])]))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ROLE_EKU[role]]), critical=False)
        )
        leaf = _critical(builder, case, role.value).sign(ca_key, hashes.SHA256())
        publish(
            paths.role_dir(role),
            {
                paths.cert(role).name: FileSpec(cert_pem(leaf)),
                paths.key(role).name: FileSpec(key_pem(key), 0o600),
            },
        )


def openssl_accepts(out: Path) -> tuple[bool, str]:
    """`openssl verify` of each leaf as its TLS peer would: pinned bundle, role purpose."""
    paths = SetPaths(out)
    said = []
    for role in RoleName:
        proc = subprocess.run(
            ["openssl", "verify", "-partial_chain", "-purpose", PURPOSE[role],
             "-CAfile", str(paths.bundle), str(paths.cert(role))],
            capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=30,
        )  # fmt: skip
        if proc.returncode != 0:
            said.append(f"{role.value}: {' '.join((proc.stdout + proc.stderr).split())[:160]}")
    return not said, "; ".join(said)


@against_servers(30)
@given(case=CASES)
def test_check_accepts_only_what_go_and_openssl_accept(
    go_peers: GoPeers, tmp_path_factory: pytest.TempPathFactory, case: Case
) -> None:
    require("openssl")
    out = tmp_path_factory.mktemp("parity") / "out"
    build_set(out, case)
    check = run_cli("check", "--out", out)
    go = exchange(go_peers, typha_env(out), felix_env(out))
    ossl, ossl_said = openssl_accepts(out)
    if check.returncode == 0:
        assert go.accepted, (case, go.describe())
        assert ossl, (case, ossl_said)
    else:
        assert check.returncode == 1, (case, check.stderr)
    # The control: a plain set (no EKU on the CA, nothing critical, valid, fit) passes all.
    plain = case.ca_eku is None and case.critical is None and not case.ca_not_yet_valid
    if plain and case.ca_key != "rsa1024":
        assert check.returncode == 0, (case, check.stdout)
        assert go.accepted and ossl, (case, go.describe(), ossl_said)
