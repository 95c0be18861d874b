"""Certificate signing requests: made on the node, judged on the signing host.

The CSR carries the node's public key and the identity it wants; the signing side
(`typhapki sign`, cfssl's profiles) decides identity, EKU and lifetime itself.
"""

from __future__ import annotations

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from typhapki.errors import ConfigError, RefusedError
from typhapki.pki.profiles import PrivateKey, key_type_of
from typhapki.pki.settings import Identity, KeyType
from typhapki.pki.x509compat import Encoding

PEM_CSR_BEGIN = b"-----BEGIN CERTIFICATE REQUEST-----"
PEM_BEGIN = b"-----BEGIN"


def build_csr(key: PrivateKey, identity: Identity) -> x509.CertificateSigningRequest:
    """A CSR asking for `identity` (CN and/or URI SAN), signed with the node's key."""
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, identity.cn)] if identity.cn else [])
    )
    if identity.uri_san is not None:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.UniformResourceIdentifier(identity.uri_san)]),
            critical=identity.cn is None,
        )
    digest = (
        hashes.SHA384()
        if isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.key_size > 256
        else hashes.SHA256()
    )
    return builder.sign(key, digest)


def csr_pem(csr: x509.CertificateSigningRequest) -> bytes:
    return csr.public_bytes(Encoding.PEM)


def parse_csr(data: bytes, source: str, key_type: KeyType) -> x509.CertificateSigningRequest:
    """A CSR from PEM whose self-signature verifies and whose key type is `key_type`.

    The signature proves the requester holds the private key; the key type is the
    one the cluster's settings allow (what `check` would demand of the certificate).
    A file holding more than one PEM block is refused: the admin may have reviewed
    another block than the one the parser would take.
    """
    if PEM_CSR_BEGIN not in data:
        raise ConfigError(f"{source}: no PEM certificate request found")
    blocks = data.count(PEM_BEGIN)
    if blocks > 1:
        raise ConfigError(
            f"{source}: {blocks} PEM blocks; give a file holding only the one CSR that was reviewed"
        )
    try:
        csr = x509.load_pem_x509_csr(data)
    except ValueError:
        raise ConfigError(f"{source}: corrupt PEM certificate request") from None
    try:
        valid = csr.is_signature_valid
    except Exception:  # an unsupported algorithm is as good as a bad signature
        valid = False
    if not valid:
        raise RefusedError(f"{source}: the CSR's signature does not verify; refusing to sign it")
    try:
        public = csr.public_key()
    except Exception:
        raise RefusedError(f"{source}: the CSR's public key is unreadable") from None
    have = key_type_of(public)
    if have is not key_type:
        raise RefusedError(
            f"{source}: CSR key type is {have.value if have else 'not supported'}, "
            f"the settings allow {key_type.value} (--key-type)"
        )
    return csr
