"""Reading certificates and keys from disk, with errors that name the file.

Never includes key material in a message: only paths and what was wrong.
"""

from __future__ import annotations

import os
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from typhapki.errors import ConfigError
from typhapki.pki.profiles import PrivateKey
from typhapki.pki.x509compat import load_pem_certificates

PEM_CERT_BEGIN = b"-----BEGIN CERTIFICATE-----"


def read_file(path: Path, what: str) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(f"{path}: {what} is missing") from None
    except IsADirectoryError:
        raise ConfigError(f"{path}: {what} is a directory, expected a file") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None


def parse_certs(data: bytes, source: str) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle; at least one."""
    if PEM_CERT_BEGIN not in data:
        raise ConfigError(f"{source}: no PEM certificate found")
    try:
        certs = load_pem_certificates(data)
    except ValueError:
        raise ConfigError(f"{source}: corrupt PEM certificate") from None
    return certs


def parse_key(data: bytes, source: str) -> PrivateKey:
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise ConfigError(
            f"{source}: private key is encrypted; typhapki needs it unencrypted"
        ) from None
    except (ValueError, Exception) as exc:  # cryptography raises several types for junk
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"{source}: not a readable PEM private key") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
        raise ConfigError(f"{source}: unsupported private key type (use ECDSA or RSA)")
    return key


def load_certs(path: Path, what: str) -> list[x509.Certificate]:
    return parse_certs(read_file(path, what), str(path))


def load_key(path: Path, what: str) -> PrivateKey:
    return parse_key(read_file(path, what), str(path))


def file_exists(path: Path) -> bool:
    """True for a file or a symlink that resolves to one."""
    return os.path.isfile(path)
