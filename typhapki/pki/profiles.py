"""Certificate profiles: the cluster CA, Typha's server leaf and Felix's client leaf.

Pure functions over `cryptography` objects; nothing here touches the disk.
Profiles follow step/cfssl/kubeadm practice (docs/certificates.md) and what Go's
crypto/tls checks in Typha (clientAuth on Felix's leaf) and Felix (serverAuth on Typha's).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from typhapki.pki.settings import Identity, KeyType, RoleName
from typhapki.pki.x509compat import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
    valid_from,
)
from typhapki.record import record

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
PublicKey = ec.EllipticCurvePublicKey | rsa.RSAPublicKey

# Clock skew between the node that issues and the pod that verifies.
BACKDATE = timedelta(minutes=5)

ROLE_EKU = {
    RoleName.TYPHA: ExtendedKeyUsageOID.SERVER_AUTH,
    RoleName.FELIX: ExtendedKeyUsageOID.CLIENT_AUTH,
}


def generate_key(key_type: KeyType) -> PrivateKey:
    if key_type is KeyType.ECDSA_P256:
        return ec.generate_private_key(ec.SECP256R1())
    if key_type is KeyType.ECDSA_P384:
        return ec.generate_private_key(ec.SECP384R1())
    bits = {KeyType.RSA_2048: 2048, KeyType.RSA_3072: 3072, KeyType.RSA_4096: 4096}[key_type]
    return rsa.generate_private_key(public_exponent=65537, key_size=bits)


def key_type_of(key: PrivateKey | PublicKey | object) -> KeyType | None:
    """The KeyType of a key, or None for anything Typha/Felix should not be given."""
    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        return {"secp256r1": KeyType.ECDSA_P256, "secp384r1": KeyType.ECDSA_P384}.get(
            key.curve.name
        )
    if isinstance(key, rsa.RSAPrivateKey | rsa.RSAPublicKey):
        return {
            2048: KeyType.RSA_2048,
            3072: KeyType.RSA_3072,
            4096: KeyType.RSA_4096,
        }.get(key.key_size)
    return None


def random_serial() -> int:
    """Positive, 159 bits of entropy: fits in 20 octets with the sign bit clear."""
    import secrets

    return secrets.randbits(159) | 1 << 64


def _hash_for(key: PrivateKey) -> hashes.SHA256 | hashes.SHA384:
    if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.key_size > 256:
        return hashes.SHA384()
    return hashes.SHA256()


def _name(cn: str | None) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)] if cn else [])


def build_ca(
    key: PrivateKey, common_name: str, days: int, now: datetime | None = None
) -> x509.Certificate:
    """A self-signed cluster CA: CA:TRUE pathlen 0, keyCertSign+cRLSign, no EKU."""
    now = now or datetime.now(UTC)
    name = _name(common_name)
    public = key.public_key()
    return (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(public)
        .serial_number(random_serial())
        .not_valid_before(now - BACKDATE)
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .sign(key, _hash_for(key))
    )


@record(frozen=True)
class Issuer:
    """A CA that signs leaves: its certificate and private key."""

    cert: x509.Certificate
    key: PrivateKey


def build_leaf(
    issuer: Issuer,
    leaf_key: PrivateKey | PublicKey,
    role: RoleName,
    identity: Identity,
    not_after: datetime,
    now: datetime | None = None,
) -> x509.Certificate:
    """Typha's server leaf (EKU serverAuth) or Felix's client leaf (EKU clientAuth).

    The caller has already clamped ``not_after`` to the CA's own not-after. Only the
    leaf's public key is used: `sign` passes the one from a CSR, the key stays elsewhere.
    """
    now = now or datetime.now(UTC)
    public = (
        leaf_key.public_key()
        if isinstance(leaf_key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey)
        else leaf_key
    )
    ca_public = issuer.cert.public_key()
    assert isinstance(ca_public, ec.EllipticCurvePublicKey | rsa.RSAPublicKey)
    # keyEncipherment only makes sense for RSA key transport.
    is_rsa = isinstance(public, rsa.RSAPublicKey)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(identity.cn))
        .issuer_name(issuer.cert.subject)
        .public_key(public)
        .serial_number(random_serial())
        .not_valid_before(max(now - BACKDATE, valid_from(issuer.cert)))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=is_rsa,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage([ROLE_EKU[role]]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_public), critical=False
        )
    )
    if identity.uri_san is not None:
        # An empty subject requires the SAN to be critical (RFC 5280 4.2.1.6).
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity.uri_san)]),
            critical=identity.cn is None,
        )
    return builder.sign(issuer.key, _hash_for(issuer.key))


def cert_pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(Encoding.PEM)


def key_pem(key: PrivateKey) -> bytes:
    """PKCS#8, unencrypted: Typha and Felix read the key file without a passphrase."""
    return key.private_bytes(
        Encoding.PEM,
        PrivateFormat.PKCS8,
        NoEncryption(),
    )


def public_key_der(key: PrivateKey | PublicKey | object) -> bytes:
    public = (
        key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) else key
    )
    # Any key type a certificate may carry (Ed25519, DSA...): compared, never trusted.
    to_bytes = getattr(public, "public_bytes", None)
    if to_bytes is None:
        return b""
    try:
        der = to_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo)
    except (ValueError, TypeError):
        return b""
    return der if isinstance(der, bytes) else b""


def same_public_key(a: PrivateKey | PublicKey | object, b: PrivateKey | PublicKey | object) -> bool:
    """Whether two keys, private or public, hold the same public key.

    ECDSA and RSA keys are compared by their public numbers: on cryptography 38 each
    DER encoding sets up an OpenSSL 3 encoder, the dearest step of a `check` after
    loading the keys. Any other type by its DER (and never equal when it has none).
    """
    public = [
        key.public_key() if isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) else key
        for key in (a, b)
    ]
    for kind in (ec.EllipticCurvePublicKey, rsa.RSAPublicKey):
        if isinstance(public[0], kind) and isinstance(public[1], kind):
            return bool(public[0].public_numbers() == public[1].public_numbers())
    der = public_key_der(public[0])
    return bool(der) and der == public_key_der(public[1])
