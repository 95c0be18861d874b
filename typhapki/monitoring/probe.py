"""What the local Typha actually serves: a TLS handshake with this node's Felix identity.

Typha reads its certificate only at start, so after a renewal the file on disk and the
certificate Typha serves differ until the pod restarts. The probe connects the way
Felix does (client certificate and key of the Felix set; server chain verified against
the CA bundle for serverAuth, any CA of it an anchor as in Go, an intermediate too; no
hostname check; then Typha's CN or URI SAN), and
compares what it was served with the Typha certificate on disk.

A refused handshake is a result, not an exception: a real Felix on this node would be
refused the same way, and the caller says so loudly.
"""

from __future__ import annotations

import socket
import ssl
from datetime import datetime
from pathlib import Path
from typing import Any

from cryptography import x509

from typhapki.errors import ConfigError
from typhapki.inventory.hostnames import TYPHA_PORT as TYPHA_PORT
from typhapki.inventory.hostnames import parse_address as parse_address
from typhapki.pki.felix_tls import felix_context, typha_identity_error
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import Identity, RoleName
from typhapki.pki.verify import fingerprint
from typhapki.pki.x509compat import valid_until
from typhapki.record import record

DEFAULT_ADDRESS = "127.0.0.1:5473"
# How long to wait, after the handshake, for Typha to refuse the client certificate
# (under TLS 1.3 the client finishes its handshake before the server has judged it).
SETTLE_SECONDS = 1.0


@record(frozen=True)
class CertSummary:
    """A certificate as the probe reports it: fingerprint and notAfter."""

    fingerprint: str
    not_after: datetime

    @classmethod
    def of(cls, cert: x509.Certificate) -> CertSummary:
        return cls(fingerprint(cert), valid_until(cert))

    def as_dict(self) -> dict[str, str]:
        return {
            "sha256_fingerprint": self.fingerprint,
            "not_after": self.not_after.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }


@record(frozen=True)
class ProbeResult:
    """What a handshake with the local Typha as this node's Felix found."""

    address: str
    accepted: bool  # the handshake succeeded both ways, as Felix's would
    error: str | None  # why not, in words an operator acts on
    served: CertSummary | None  # what Typha presented (even when it failed verification)
    disk: CertSummary | None  # the Typha certificate in the live set
    disk_error: str | None = None

    @property
    def serves_disk(self) -> bool:
        return (
            self.accepted
            and self.served is not None
            and self.disk is not None
            and self.served.fingerprint == self.disk.fingerprint
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "accepted": self.accepted,
            "error": self.error,
            "serves_disk_certificate": self.serves_disk,
            "served": self.served.as_dict() if self.served else None,
            "disk": self.disk.as_dict() if self.disk else None,
            "disk_error": self.disk_error,
        }


def _disk_certificate(paths: SetPaths) -> tuple[CertSummary | None, str | None]:
    from typhapki.pki.pem import load_certs

    try:
        chain = load_certs(paths.cert(RoleName.TYPHA), "Typha certificate")
    except ConfigError as exc:
        return None, str(exc)
    return CertSummary.of(chain[0]), None


def _refusal(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
    return str(reason).replace("_", " ").lower() if isinstance(exc, ssl.SSLError) else str(reason)


def _served_unverified(host: str, port: int, paths: SetPaths, timeout: float) -> CertSummary | None:
    """Fetch the certificate Typha presents, without judging it (for the report only)."""
    try:
        ctx = felix_context(paths, verify=False)
        with (
            socket.create_connection((host, port), timeout=timeout) as raw,
            ctx.wrap_socket(raw) as tls,
        ):
            der = tls.getpeercert(binary_form=True)
    except (OSError, ConfigError):
        return None
    return CertSummary.of(x509.load_der_x509_certificate(der)) if der else None


def probe(
    address: str,
    out: Path,
    typha_identity: Identity,
    timeout: float = 5.0,
    felix_identity: Identity | None = None,
) -> ProbeResult:
    """Handshake with the Typha at `address` as this node's Felix; never raises for a
    refused or failed handshake (only for a malformed address). `felix_identity`, the
    cluster's Felix identity when known, lets a refusal name its cause."""
    host, port = parse_address(address)
    paths = SetPaths(out)
    disk, disk_error = _disk_certificate(paths)

    def failed(error: str, served: CertSummary | None = None) -> ProbeResult:
        return ProbeResult(address, False, error, served, disk, disk_error)

    try:
        ctx = felix_context(paths, verify=True)
    except ConfigError as exc:
        return failed(f"cannot act as this node's Felix: {exc}")
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        return failed(f"nothing listens on {address}: is Typha running on this node?")
    except TimeoutError:
        return failed(f"no answer from {address} within {timeout:g}s")
    except OSError as exc:
        return failed(f"cannot connect to {address}: {exc.strerror or exc}")
    with raw:
        try:
            tls = ctx.wrap_socket(raw)
        except ssl.SSLCertVerificationError as exc:
            served = _served_unverified(host, port, paths, timeout)
            return failed(
                "Felix would refuse Typha's certificate: "
                f"{exc.verify_message or exc.reason} (verified against {paths.bundle})",
                served,
            )
        except ssl.SSLError as exc:
            return failed(f"Typha refused the handshake: {_refusal(exc)}")
        except TimeoutError:
            return failed(f"the TLS handshake with {address} timed out after {timeout:g}s")
        except OSError as exc:
            return failed(f"the TLS handshake with {address} failed: {exc.strerror or exc}")
        with tls:
            der = tls.getpeercert(binary_form=True)
            served = CertSummary.of(x509.load_der_x509_certificate(der)) if der else None
            peer = tls.getpeercert() or {}
            mismatch = typha_identity_error(dict(peer), typha_identity)
            if mismatch is not None:
                return failed(f"Felix would refuse Typha's identity: {mismatch}", served)
            # TLS 1.3: Typha judges the client certificate after our handshake is done;
            # a refusal arrives as an alert (or a close) right after it.
            tls.settimeout(SETTLE_SECONDS)
            try:
                data = tls.recv(1)
            except TimeoutError:
                data = None  # Typha waits for Felix's hello: accepted
            except ssl.SSLError as exc:
                why = _felix_mismatch(paths, felix_identity)
                return failed(
                    f"Typha refused this node's Felix certificate: {_refusal(exc)}"
                    + (f"; {why}" if why else ""),
                    served,
                )
            except OSError as exc:
                return failed(
                    f"Typha dropped the connection after the handshake: {exc.strerror or exc}",
                    served,
                )
            if data == b"":
                return failed(_closed_after_handshake(paths, felix_identity), served)
    return ProbeResult(address, True, None, served, disk, disk_error)


def _felix_names(paths: SetPaths) -> tuple[str | None, list[str]] | None:
    """The CN and URI SANs of the Felix certificate on disk (None: unreadable)."""
    from typhapki.pki.pem import load_certs
    from typhapki.pki.verify import subject_cn, uri_sans

    try:
        leaf = load_certs(paths.cert(RoleName.FELIX), "Felix certificate")[0]
    except ConfigError:
        return None
    return subject_cn(leaf), uri_sans(leaf)


def _felix_mismatch(paths: SetPaths, felix: Identity | None) -> str | None:
    """Why Typha would refuse this node's Felix identity, when that is known: the
    certificate on disk matches neither the CN nor the URI SAN of the cluster's Felix
    identity (Typha accepts either), which is what TYPHA_CLIENTCN / TYPHA_CLIENTURISAN
    hold. None when it matches or nothing is known."""
    names = _felix_names(paths)
    if felix is None or names is None:
        return None
    cn, uris = names
    if (felix.cn is not None and felix.cn == cn) or (felix.uri_san in uris):
        return None
    return (
        f"this node's Felix certificate (CN {cn!r}, URI SANs {uris or 'none'}) is not the "
        f"cluster's Felix identity {felix.describe()}, which Typha requires "
        "(TYPHA_CLIENTCN / TYPHA_CLIENTURISAN): reissue the Felix set"
    )


def _closed_after_handshake(paths: SetPaths, felix: Identity | None) -> str:
    """Typha closes without a word when it shuts down or sheds connections (and, in
    Calico versions that check the client's CN after the handshake, on a mismatch):
    the identity is blamed only when the certificate on disk is known not to match."""
    head = "Typha closed the connection right after the handshake"
    mismatch = _felix_mismatch(paths, felix)
    if mismatch is not None:
        return f"{head}: {mismatch}"
    names = _felix_names(paths)
    shown = f" (CN {names[0]!r}, URI SANs {names[1] or 'none'})" if names else ""
    return (
        f"{head}, without saying why: Typha does so when it is shutting down or shedding "
        f"connections, or when this node's Felix certificate{shown} is not the identity "
        "its TYPHA_CLIENTCN / TYPHA_CLIENTURISAN name; Typha's log says which"
    )
