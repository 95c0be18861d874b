"""cryptography APIs newer than Debian bookworm's cryptography 38, with a fallback.

typhapki runs on cryptography >= 38 (the .deb on bookworm) and on the newest release.
Newer releases deprecate the naive-datetime properties (a warning, an error under the
test suite), older ones lack their replacements; these helpers pick what exists.
"""

from __future__ import annotations

from datetime import UTC, datetime
from functools import lru_cache

from cryptography import __version__, x509
from cryptography.hazmat.primitives.asymmetric import ec, rsa

# Since cryptography 42 the public load_pem_private_key *is* a Rust function (the
# serialization package assigns it), reached here directly; before, through the OpenSSL
# backend, and cryptography.x509 imports the public package anyway.
_RUST_KEY_LOADER = int(__version__.split(".")[0]) >= 42
if _RUST_KEY_LOADER:
    # The PEM and DER enums from the module that defines them (the public package
    # re-exports them): that package's __init__ also imports its SSH key support, and
    # with it dataclasses, inspect and the cipher modules, about 8 ms of every `check`
    # and `facts` (37-39 M instructions), which `check`'s target against the openssl
    # pipeline needs: without it (issue 42), `check` was 1.97x faster than the pipeline,
    # against 2x (docs/performance.md). tests/pki/test_x509compat.py asserts these are
    # the public objects. On cryptography 38 only public modules: there they would save
    # nothing.
    from cryptography.hazmat.primitives._serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )
else:
    from cryptography.hazmat.primitives.serialization import (
        Encoding,
        NoEncryption,
        PrivateFormat,
        PublicFormat,
    )

__all__ = ["Encoding", "NoEncryption", "PrivateFormat", "PublicFormat"]

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


@lru_cache(maxsize=64)
def public_key(cert: x509.Certificate) -> object:
    """`cert.public_key()`, parsed once per certificate (equal certificates share it).

    cryptography 38 parses the key anew through its OpenSSL backend on every call, about
    as costly as reading the certificate; `check` and `facts` ask each certificate for
    its key several times (parsing, the chain, the key match, the fact)."""
    return cert.public_key()


def load_pem_private_key(data: bytes) -> object:
    """`serialization.load_pem_private_key(data, password=None)`, without importing the
    serialization package where the function it would call can be reached directly."""
    if _RUST_KEY_LOADER:
        from cryptography.hazmat.bindings._rust import openssl as rust_openssl

        key: object = rust_openssl.keys.load_pem_private_key(data, None)
        return key
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    return load_pem_private_key(data, password=None)


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
    key = public_key(issuer)
    if isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(algorithm))
    elif isinstance(key, rsa.RSAPublicKey):
        from cryptography.hazmat.primitives.asymmetric import padding  # 2 ms on cryptography 38

        key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), algorithm)
    else:
        raise TypeError("unsupported issuer key type")
