"""Reading certificates and keys from disk, with errors that name the file.

Never includes key material in a message: only paths and what was wrong.

Files are read with `safeio.read_regular` (regular files only, never blocking, size
capped), and every certificate is parsed completely here: `cryptography` parses
extensions lazily, so a malformed or duplicated extension would otherwise surface as
an exception wherever a field is first touched. After `parse_certs` every field
typhapki relies on has been read once, inside the error boundary.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from typhapki.errors import ConfigError, TyphapkiError
from typhapki.pki.profiles import PrivateKey
from typhapki.pki.x509compat import load_pem_private_key, public_key, valid_from, valid_until
from typhapki.safeio import UnreadableFileError, read_regular

PEM_CERT_BEGIN = b"-----BEGIN CERTIFICATE-----"

# Far above any bundle or key typhapki writes (a bundle of a few CAs is a few KB).
PKI_FILE_LIMIT = 1024 * 1024


def read_file(path: Path, what: str) -> bytes:
    """The bytes of a certificate or key file: a regular file of at most 1 MiB."""
    try:
        return read_regular(path, what, PKI_FILE_LIMIT)
    except UnreadableFileError as exc:
        if not os.path.exists(path):  # also a dangling symlink: the file is not there
            raise ConfigError(f"{path}: {what} is missing") from None
        reason = str(exc).removeprefix(f"{what} {path}: ")
        if os.path.isdir(path):
            raise ConfigError(f"{path}: {what} is a directory, expected a file") from None
        raise ConfigError(f"{path}: cannot read {what}: {reason}") from None


def _short(exc: BaseException) -> str:
    """A one-line, bounded reason from a parser exception (never key material: certs only)."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:117] + "..."


def touch_everything(cert: x509.Certificate) -> None:
    """Read every field typhapki relies on, so that later reads cannot raise.

    Raises whatever `cryptography` raises for a malformed certificate.
    """
    for ext in cert.extensions:  # parses them all; a duplicate raises here
        _ = ext.value, ext.critical, ext.oid
    cert.subject.rfc4514_string()
    cert.issuer.rfc4514_string()
    if cert.serial_number <= 0:  # Go refuses these since 1.23, cryptography will too
        raise ValueError("serial number is not positive")
    _ = valid_from(cert), valid_until(cert)
    public_key(cert)
    cert.fingerprint(hashes.SHA256())


def _load_pem_bundle(data: bytes) -> list[x509.Certificate]:
    """Every certificate of a PEM bundle (built into cryptography >= 39)."""
    loader = getattr(x509, "load_pem_x509_certificates", None)
    if loader is not None:
        return list(loader(data))
    end = b"-----END CERTIFICATE-----"
    blocks = data.split(end)[:-1]
    if not blocks:
        raise ValueError("no certificate found")
    return [x509.load_pem_x509_certificate(block + end + b"\n") for block in blocks]


def parse_certs(data: bytes, source: str) -> list[x509.Certificate]:
    """Every certificate in a PEM bundle, each fully parsed; at least one."""
    if PEM_CERT_BEGIN not in data:
        raise ConfigError(f"{source}: no PEM certificate found")
    try:
        with warnings.catch_warnings():
            # A non-positive serial warns here and is refused below, as one line.
            warnings.simplefilter("ignore")
            certs = _load_pem_bundle(data)
    except ValueError:
        raise ConfigError(f"{source}: corrupt PEM certificate") from None
    except Exception as exc:  # cryptography raises several types for junk
        raise ConfigError(f"{source}: corrupt PEM certificate ({_short(exc)})") from None
    for index, cert in enumerate(certs):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                touch_everything(cert)
        except TyphapkiError:
            raise
        except Exception as exc:
            which = f"certificate {index + 1} of {len(certs)}" if len(certs) > 1 else "certificate"
            raise ConfigError(f"{source}: {which} cannot be parsed: {_short(exc)}") from None
    return certs


def parse_key(data: bytes, source: str) -> PrivateKey:
    try:
        key = load_pem_private_key(data)
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
