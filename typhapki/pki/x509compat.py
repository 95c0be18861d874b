"""cryptography APIs newer than Debian bookworm's cryptography 38, with a fallback.

typhapki runs on cryptography >= 38 (the .deb on bookworm) and on the newest release.
Newer releases deprecate the naive-datetime properties (a warning, an error under the
test suite), older ones lack their replacements; these helpers pick what exists.
"""

from __future__ import annotations

from datetime import UTC, datetime

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

_PEM_BLOCK_END = b"-----END CERTIFICATE-----"


def valid_from(cert: x509.Certificate) -> datetime:
    """notBefore as an aware UTC datetime (cryptography >= 42: not_valid_before_utc)."""
    aware = getattr(cert, "not_valid_before_utc", None)
    if isinstance(aware, datetime):
        return aware
    return cert.not_valid_before.replace(tzinfo=UTC)


def valid_until(cert: x509.Certificate) -> datetime:
    """notAfter as an aware UTC datetime (cryptography >= 42: not_valid_after_utc)."""
    aware = getattr(cert, "not_valid_after_utc", None)
    if isinstance(aware, datetime):
        return aware
    return cert.not_valid_after.replace(tzinfo=UTC)


def load_pem_certificates(data: bytes) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (cryptography >= 39 has this built in).
    ValueError when there is none or one is corrupt."""
    loader = getattr(x509, "load_pem_x509_certificates", None)
    if loader is not None:
        return list(loader(data))
    certs = []
    for block in data.split(_PEM_BLOCK_END)[:-1]:
        certs.append(x509.load_pem_x509_certificate(block + _PEM_BLOCK_END + b"\n"))
    if not certs:
        raise ValueError("no certificate found")
    return certs


def verify_directly_issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> None:
    """Raise unless `issuer`'s key signed `cert` and the names chain (cryptography >= 40
    has this built in). ECDSA and RSA PKCS#1 v1.5 signatures, the ones typhapki makes."""
    builtin = getattr(cert, "verify_directly_issued_by", None)
    if builtin is not None:
        builtin(issuer)
        return
    if cert.issuer != issuer.subject:
        raise ValueError("issuer name does not match the issuer's subject")
    algorithm = cert.signature_hash_algorithm
    if algorithm is None:
        raise TypeError("unsupported signature algorithm")
    key = issuer.public_key()
    if isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(algorithm))
    elif isinstance(key, rsa.RSAPublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), algorithm)
    else:
        raise TypeError("unsupported issuer key type")
