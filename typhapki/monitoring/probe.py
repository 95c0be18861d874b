"""What the local Typha actually serves: a TLS handshake with this node's Felix identity.

Typha reads its certificate only at start, so after a renewal the file on disk and the
certificate Typha serves differ until the pod restarts. The probe connects the way
Felix does (client certificate and key of the Felix set; server chain verified against
the CA bundle for serverAuth, any CA of it an anchor as in Go, an intermediate too; no
hostname check; then Typha's CN or URI SAN), and
compares what it was served with the Typha certificate on disk.

With a TLS policy (`tls_min_version`, `tls_cipher_suites`: typhapki/settings/wiring.py),
the probe then proves that Typha enforces it, never assumes so: as this node's Felix it
offers TLS 1.2 alone when 1.3 is required, and TLS 1.2 suites outside the list one at a
time; a Typha that accepts any of them ignores the policy, as Calico before 3.31 (cipher
suites) and 3.32 (minimum version) does, which read neither variable.

A refused handshake is a result, not an exception: a real Felix on this node would be
refused the same way, and the caller says so loudly. A refusal of the policy's offers
is an alert that names it (protocol_version, handshake_failure: `REFUSAL_ALERTS`): a
connection closed or reset before Typha answered proves nothing either way (a Typha
that sheds connections, or restarts, closes every one), so the policy is then "not
proven", never "enforced".
"""

from __future__ import annotations

import socket
import ssl
import time
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

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

if TYPE_CHECKING:
    from typhapki.settings.wiring import TlsPolicy

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


# Go's TLS 1.2 suite names (typhapki/settings/wiring.py CIPHER_SUITES) as OpenSSL names them.
OPENSSL_SUITES = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
}
# The suites offered outside the list, best first: those every Calico release accepts
# by default (crypto/pkg/tls/tls.go), so a Typha that ignores the list takes the first.
OFFERED_FIRST = ("AES_128_GCM", "AES_256_GCM", "CHACHA20")


@record(frozen=True)
class PolicyResult:
    """Whether Typha enforces the TLS policy, proven by handshakes it must refuse."""

    checked: tuple[str, ...]  # what was tried, in words
    unenforced: str | None = None  # what Typha accepted that the policy forbids
    unproven: str | None = None  # why a check proved nothing (a connection failed)

    @property
    def error(self) -> str | None:
        if self.unenforced is not None:
            return f"policy unenforced: {self.unenforced}"
        if self.unproven is not None:
            return f"policy not proven: {self.unproven}"
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "checked": list(self.checked),
            "enforced": None if self.unproven and not self.unenforced else not self.unenforced,
            "error": self.error,
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
    policy: PolicyResult | None = None  # the TLS policy's proof (None: no policy set)

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
            "policy": self.policy.as_dict() if self.policy is not None else None,
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
    policy: TlsPolicy | None = None,
) -> ProbeResult:
    """Handshake with the Typha at `address` as this node's Felix; never raises for a
    refused or failed handshake (only for a malformed address). `felix_identity`, the
    cluster's Felix identity when known, lets a refusal name its cause. `policy`: the
    TLS policy Typha must be proven to enforce once it accepted Felix."""
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
        except (ssl.SSLEOFError, ssl.SSLZeroReturnError):
            # Closed with no alert (a bare EOF, or a close_notify, as the race between the
            # close and the client's last flight decides): not a refusal, but Felix gets
            # no Typha either.
            return failed(
                "Typha closed the connection during the handshake, without an alert: "
                "shutting down or shedding connections?"
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
    proven = None
    if policy is not None and (policy.min_version == "1.3" or policy.cipher_suites):
        key = x509.load_der_x509_certificate(der).public_key() if der else None
        proven = prove_policy(host, port, paths, policy, _suite_kind(key), timeout)
    return ProbeResult(address, True, None, served, disk, disk_error, proven)


def _suite_kind(key: object) -> str:
    """The TLS 1.2 suites a Typha key serves: ECDHE_RSA for RSA, ECDHE_ECDSA otherwise."""
    from cryptography.hazmat.primitives.asymmetric import rsa

    return "RSA" if isinstance(key, rsa.RSAPublicKey) else "ECDSA"


# The alerts with which a TLS server refuses what a client offers (RFC 8446 6.2): Go's
# crypto/tls, as Typha, answers a version under its MinVersion with protocol_version and
# an offer without a suite it takes with handshake_failure; insufficient_security is
# the same refusal in other stacks. Any other alert refuses something else.
REFUSAL_ALERTS = {40: "handshake failure", 70: "protocol version", 71: "insufficient security"}
_ALERT_RECORD = 21
_HANDSHAKE_RECORD = 22
_MAX_READ = 64 * 1024  # of the server's first flight, kept to find its alert


def _first_alert(received: bytes | bytearray) -> int | None:
    """The description of the first alert among the server's plaintext TLS records
    (before its ChangeCipherSpec, where a refusal of the offer comes), else None."""
    at = 0
    while at + 5 <= len(received):
        kind, length = received[at], int.from_bytes(received[at + 3 : at + 5], "big")
        if kind == _ALERT_RECORD:
            body = received[at + 5 : at + 5 + length]
            return body[1] if len(body) >= 2 else None
        if kind != _HANDSHAKE_RECORD:
            return None  # ChangeCipherSpec (what follows is encrypted), or not TLS
        at += 5 + length
    return None


def _tls12_handshake(
    host: str, port: int, ctx: ssl.SSLContext, timeout: float
) -> tuple[bool | None, str]:
    """One TLS 1.2 handshake as Felix, over memory BIOs so that Typha's answer can be
    read: (True, the suite) when Typha completed it, which under TLS 1.2 comes after it
    judged everything; (False, why) when Typha refused it with an alert that names a
    refusal of the offer (REFUSAL_ALERTS); (None, why) for anything else, which proves
    nothing: a connection closed or reset before Typha answered (a Typha that sheds
    connections or restarts does so, and so does a front that drops what it does not
    like), another alert, a silence. Bounded by `timeout` in all, connect included."""
    deadline = time.monotonic() + timeout
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return None, f"cannot connect to {host}:{port}: {exc.strerror or exc}"
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_side=False)
    received = bytearray()
    with raw:
        while True:
            try:
                tls.do_handshake()
                return True, (tls.cipher() or ("?",))[0]
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLError as exc:
                alert = _first_alert(received)
                if alert in REFUSAL_ALERTS:
                    return False, f"alert {REFUSAL_ALERTS[alert]}"
                return None, f"the TLS 1.2 handshake failed without a refusal: {_refusal(exc)}"
            try:
                if pending := outgoing.read():
                    raw.sendall(pending)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                raw.settimeout(left)
                data = raw.recv(16384)
            except TimeoutError:
                return None, f"no answer to TLS 1.2 within {timeout:g}s"
            except OSError as exc:
                return None, _closed_before_answering(received, exc)
            if not data:
                return None, _closed_before_answering(received, None)
            if len(received) < _MAX_READ:
                received += data
            incoming.write(data)


def _closed_before_answering(received: bytes | bytearray, exc: OSError | None) -> str:
    """Why a connection that ended without a TLS verdict proves nothing, in words."""
    reset = isinstance(exc, ConnectionResetError | BrokenPipeError | ConnectionAbortedError)
    if exc is not None and not reset:
        return f"the TLS 1.2 handshake failed: {exc.strerror or exc}"
    how = "reset" if reset else "closed"
    when = "during the handshake" if received else "before answering (no ServerHello)"
    return (
        f"Typha {how} the connection {when}, without an alert: a refusal is an alert; a "
        "Typha that sheds connections or restarts closes them too"
    )


def prove_policy(
    host: str, port: int, paths: SetPaths, policy: TlsPolicy, kind: str, timeout: float
) -> PolicyResult:
    """Offer Typha, as this node's Felix (the set under `paths`), what `policy` forbids:
    TLS 1.2 alone when 1.3 is required, and TLS 1.2 suites of the key's `kind` outside
    the list, one at a time (those Calico accepts by default first). Any acceptance:
    the policy is unenforced."""
    from typhapki.settings.wiring import CIPHER_SUITES

    checked: list[str] = []
    unproven = None

    def tls12(ciphers: str | None) -> ssl.SSLContext:
        # The client certificate Typha accepted a moment ago: only the offer differs.
        ctx = felix_context(paths, verify=False)  # Typha was verified a moment ago too
        ctx.minimum_version = ctx.maximum_version = ssl.TLSVersion.TLSv1_2
        if ciphers is not None:
            ctx.set_ciphers(ciphers)
        return ctx

    if policy.min_version == "1.3":
        checked.append("TLS 1.2 offered, tls_min_version 1.3")
        try:
            ok, what = _tls12_handshake(host, port, tls12(None), timeout)
        except ConfigError as exc:
            ok, what = None, f"cannot act as this node's Felix: {exc}"
        if ok:
            return PolicyResult(tuple(checked), f"Typha accepted a TLS 1.2 client ({what}) "
                                "although tls_min_version is 1.3")  # fmt: skip
        if ok is None:
            unproven = f"{checked[-1]}: {what}"
    if policy.cipher_suites:
        outside = [n for n in CIPHER_SUITES if f"_{kind}_" in n and n not in policy.cipher_suites]
        outside.sort(key=lambda n: next(
            (i for i, w in enumerate(OFFERED_FIRST) if w in n), len(OFFERED_FIRST)))  # fmt: skip
        for name in outside[: len(OFFERED_FIRST)]:
            try:
                ctx = tls12(OPENSSL_SUITES[name])
            except ssl.SSLError:
                continue  # this OpenSSL cannot offer it
            except ConfigError as exc:
                unproven = f"cannot act as this node's Felix: {exc}"
                break
            checked.append(f"TLS 1.2 suite {name} offered, outside tls_cipher_suites")
            ok, what = _tls12_handshake(host, port, ctx, timeout)
            if ok:
                return PolicyResult(tuple(checked), f"Typha accepted TLS 1.2 suite {name}, "
                                    "which tls_cipher_suites does not list")  # fmt: skip
            if ok is None:
                unproven = f"{checked[-1]}: {what}"
    return PolicyResult(tuple(checked), None, unproven)


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
