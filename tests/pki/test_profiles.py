"""Certificate profiles: the fields docs/certificates.md lists, for every key type,
and a real RFC 5280 path validation (cryptography's verifier) in each role."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import ExtendedKeyUsageOID
from hypothesis import given
from hypothesis import strategies as st

from typhapki.pki.profiles import (
    BACKDATE,
    Issuer,
    build_ca,
    build_leaf,
    generate_key,
    key_type_of,
    random_serial,
    same_public_key,
)
from typhapki.pki.settings import Identity, KeyType, RoleName
from typhapki.pki.x509compat import valid_from, verify_directly_issued_by

ALL_KEY_TYPES = list(KeyType)


def make_ca(key_type: KeyType = KeyType.ECDSA_P256, days: int = 3650) -> Issuer:
    key = generate_key(key_type)
    return Issuer(build_ca(key, "test-ca", days), key)


@pytest.mark.parametrize("key_type", ALL_KEY_TYPES)
def test_generate_key_gives_the_asked_type(key_type: KeyType) -> None:
    assert key_type_of(generate_key(key_type)) is key_type


def test_serials_are_positive_random_and_fit_20_octets() -> None:
    serials = {random_serial() for _ in range(200)}
    assert len(serials) == 200
    for serial in serials:
        assert serial > 0
        assert serial.bit_length() <= 159  # 20 octets with the sign bit clear
        assert serial.bit_length() >= 64


def test_ca_profile() -> None:
    now = datetime.now(UTC)
    ca = make_ca().cert
    bc = ca.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and bc.value.ca and bc.value.path_length == 0
    ku = ca.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.key_cert_sign and ku.value.crl_sign
    assert not ku.value.digital_signature
    with pytest.raises(x509.ExtensionNotFound):
        ca.extensions.get_extension_for_class(x509.ExtendedKeyUsage)
    ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    assert ca.issuer == ca.subject
    assert now - BACKDATE - timedelta(seconds=5) <= valid_from(ca) < now


@pytest.mark.parametrize("key_type", ALL_KEY_TYPES)
@pytest.mark.parametrize("role", list(RoleName))
def test_leaf_profile(key_type: KeyType, role: RoleName) -> None:
    ca = make_ca()
    key = generate_key(key_type)
    leaf = build_leaf(
        ca, key, role, Identity("calico-x", None), datetime.now(UTC) + timedelta(days=30)
    )
    bc = leaf.extensions.get_extension_for_class(x509.BasicConstraints)
    assert bc.critical and not bc.value.ca
    ku = leaf.extensions.get_extension_for_class(x509.KeyUsage)
    assert ku.critical and ku.value.digital_signature
    assert ku.value.key_encipherment == isinstance(key, rsa.RSAPrivateKey)
    assert not ku.value.key_cert_sign
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    want = (
        ExtendedKeyUsageOID.SERVER_AUTH
        if role is RoleName.TYPHA
        else ExtendedKeyUsageOID.CLIENT_AUTH
    )
    assert list(eku) == [want]
    ski = leaf.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    aki = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    ca_ski = ca.cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    assert aki.key_identifier == ca_ski.digest
    assert ski.digest != ca_ski.digest
    verify_directly_issued_by(leaf, ca.cert)


def test_uri_only_identity_has_empty_subject_and_critical_san() -> None:
    ca = make_ca()
    leaf = build_leaf(
        ca,
        generate_key(KeyType.ECDSA_P256),
        RoleName.FELIX,
        Identity(None, "spiffe://cluster.local/ns/kube-system/sa/calico-node"),
        datetime.now(UTC) + timedelta(days=1),
    )
    assert len(leaf.subject) == 0
    san = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert san.critical
    assert san.value.get_values_for_type(x509.UniformResourceIdentifier) == [
        "spiffe://cluster.local/ns/kube-system/sa/calico-node"
    ]


def test_leaf_never_starts_before_its_ca() -> None:
    ca = make_ca()
    leaf = build_leaf(
        ca,
        generate_key(KeyType.ECDSA_P256),
        RoleName.TYPHA,
        Identity("calico-typha", None),
        datetime.now(UTC) + timedelta(days=1),
        now=valid_from(ca.cert),  # issued in the CA's first minute
    )
    assert valid_from(leaf) >= valid_from(ca.cert)


def _verify_client(ca: Issuer, leaf: x509.Certificate) -> None:
    from cryptography.x509.verification import (
        Criticality,
        ExtensionPolicy,
        PolicyBuilder,
        Store,
    )

    # Web PKI defaults, except that a SAN is optional: Typha identifies Felix by CN or
    # URI SAN and never looks at DNS names.
    ee = ExtensionPolicy.webpki_defaults_ee().may_be_present(
        x509.SubjectAlternativeName, Criticality.AGNOSTIC, None
    )
    verifier = (
        PolicyBuilder()
        .store(Store([ca.cert]))
        .time(datetime.now(UTC))
        .extension_policies(ca_policy=ExtensionPolicy.webpki_defaults_ca(), ee_policy=ee)
        .build_client_verifier()
    )
    verifier.verify(leaf, [])


def test_rfc5280_client_path_validation_accepts_felix_and_refuses_typha() -> None:
    """cryptography's strict RFC 5280 verifier: a well-formed chain, EKU enforced.

    The server direction is proven by real handshakes (tests/test_tls_interop.py).
    The verifier with extension policies is cryptography >= 45: the newest leg runs
    this; Debian's cryptography 38 has none (the Debian leg relies on the handshakes).
    """
    verification = pytest.importorskip("cryptography.x509.verification")
    if not hasattr(verification, "ExtensionPolicy"):
        pytest.skip("cryptography < 45: no verifier with extension policies")
    ca = make_ca()
    future = datetime.now(UTC) + timedelta(days=30)
    felix = build_leaf(
        ca, generate_key(KeyType.ECDSA_P256), RoleName.FELIX, Identity("calico-node", None), future
    )
    _verify_client(ca, felix)
    typha = build_leaf(
        ca, generate_key(KeyType.ECDSA_P256), RoleName.TYPHA, Identity("calico-typha", None), future
    )
    with pytest.raises(verification.VerificationError, match=r"EKU|extended key usage|usage"):
        _verify_client(ca, typha)


# Private keys typhapki reads are ECDSA or RSA (pki/pem.py refuses others); a
# certificate may carry any type, so the Ed25519 key is compared as a public key only.
_KEYS: list[ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey | ed25519.Ed25519PrivateKey] = [
    ec.generate_private_key(ec.SECP256R1()),
    ec.generate_private_key(ec.SECP256R1()),
    ec.generate_private_key(ec.SECP384R1()),
    rsa.generate_private_key(65537, 2048),
    ed25519.Ed25519PrivateKey.generate(),
]


@given(
    first=st.integers(0, len(_KEYS) - 1),
    second=st.integers(0, len(_KEYS) - 1),
    first_public=st.booleans(),
    second_public=st.booleans(),
)
def test_same_public_key_is_the_der_comparison(
    first: int, second: int, first_public: bool, second_public: bool
) -> None:
    """Public numbers for ECDSA and RSA say what the SubjectPublicKeyInfo says."""
    ed = len(_KEYS) - 1
    a: object = _KEYS[first].public_key() if first_public or first == ed else _KEYS[first]
    b: object = _KEYS[second].public_key() if second_public or second == ed else _KEYS[second]
    der_a = _KEYS[first].public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    der_b = _KEYS[second].public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    assert same_public_key(a, b) is (der_a == der_b)
    assert (first == second) is (der_a == der_b)  # the keys differ: the test can fail
