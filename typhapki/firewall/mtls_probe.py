"""The probes of the mTLS proof: the socket I/O of typhapki/firewall/mtls_proof.py.

Against one Typha, in order, stopping at the first that decides: a TLS 1.2 client
without a certificate, the same client under TLS 1.3 (an acceptance under either
version voids the proof), a client with a certificate of a throwaway CA (made in
memory, never on disk), then this node's Felix (as typhapki/monitoring/probe.py
connects). The last two speak TLS 1.2, or TLS 1.3 against a Typha that refused TLS 1.2
outright and the certificate-less client under TLS 1.3 (`prove`).

The negative probes' handshake runs over memory BIOs so that the server's first
flight can be read: a refusal counts only after Typha sent its ServerHello and asked
for a certificate (CertificateRequest), so neither a server that does not speak TLS
1.2 nor a connection reset read as a refusal. Under TLS 1.2 the server's Finished
comes only after it has checked the client's certificate: a completed handshake is an
acceptance. Every probe is bounded by its timeout, connect included.
"""

from __future__ import annotations

import os
import socket
import ssl
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.firewall.mtls_proof import (
    ACCEPTED,
    INCONCLUSIVE,
    PLAIN,
    REFUSED,
    SILENT,
    UNREACHABLE,
    Attempt,
    Proof,
    judge,
)
from typhapki.inventory.hostnames import address_ok as address_ok
from typhapki.inventory.hostnames import parse_address
from typhapki.record import replace

if TYPE_CHECKING:
    from typhapki.pki.settings import Identity

DEFAULT_TIMEOUT = 5.0

_HANDSHAKE = 22
_ALERT = 21
_SERVER_HELLO = 2
_CERTIFICATE_REQUEST = 13
_SERVER_HELLO_DONE = 14


def _split(address: str) -> tuple[str, int]:
    return parse_address(address)


def port_of(address: str) -> int:
    """The port `address` names (Typha's 5473 when it names none)."""
    return _split(address)[1]


def unreachable(address: str, why: str) -> Proof:
    """The verdict when no Typha could be probed at all."""
    return judge(address, Attempt(UNREACHABLE, why), None, None)


def listens(address: str, timeout: float) -> bool:
    """Something accepts a TCP connection at `address` within `timeout`."""
    host, port = _split(address)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def probe_target(
    local: str, configured: Sequence[str], timeout: float, port: int | None = None
) -> str | None:
    """The local Typha when one listens, else the first configured address, else None.
    `port`: the Typha port of the live switch's stage, for addresses that name none."""
    local = with_port(local, port)
    if listens(local, timeout):
        return local
    return with_port(configured[0], port) if configured else None


class _ServerFlight:
    """The server's plaintext TLS 1.2 handshake messages, reassembled from records."""

    def __init__(self) -> None:
        self.received = 0
        self.raw = bytearray()  # not yet parsed; nothing is kept once the flight is read
        self.messages: list[int] = []
        self.alert: bool = False
        self.not_tls: bool = False
        self._buffer = bytearray()
        self._done = False

    def feed(self, data: bytes) -> None:
        self.received += len(data)
        if self._done:
            return
        self.raw += data
        while len(self.raw) >= 5 and not self._done:
            kind, length = self.raw[0], int.from_bytes(self.raw[3:5], "big")
            if kind not in (_HANDSHAKE, _ALERT) or self.raw[1] != 3:
                self.not_tls = not self.messages and not self.alert
                self._done = True
                return
            if len(self.raw) < 5 + length:
                return
            body = bytes(self.raw[5 : 5 + length])
            del self.raw[: 5 + length]
            if kind == _ALERT:
                self.alert = True
                self._done = True
                return
            self._buffer += body
            while len(self._buffer) >= 4:
                size = int.from_bytes(self._buffer[1:4], "big")
                if len(self._buffer) < 4 + size:
                    break
                self.messages.append(self._buffer[0])
                del self._buffer[: 4 + size]
                if self.messages[-1] == _SERVER_HELLO_DONE:
                    self._done = True  # what follows (after our Finished) is encrypted
                    return

    @property
    def spoke_tls(self) -> bool:
        return bool(self.messages) or self.alert

    @property
    def asked_for_certificate(self) -> bool:
        return _SERVER_HELLO in self.messages and _CERTIFICATE_REQUEST in self.messages


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None) or getattr(exc, "strerror", None) or str(exc)
    return " ".join(str(reason).replace("_", " ").lower().split())


def _handshake(
    address: str,
    ctx: ssl.SSLContext,
    timeout: float,
    check: Callable[[ssl.SSLObject], str | None] | None = None,
) -> Attempt:
    """A client handshake over memory BIOs, bounded by `timeout` in all, connect
    included. `check`: once the handshake completed, why this client would still walk
    away (None: it would not). A TLS 1.3 handshake is judged after it completes
    (`_tls13_verdict`): under 1.3 the server refuses a client certificate (or its
    absence) with an alert after the client's handshake is over."""
    host, port = _split(address)
    deadline = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except ConnectionRefusedError:
        return Attempt(UNREACHABLE, f"nothing listens on {address}")
    except TimeoutError:
        return Attempt(UNREACHABLE, f"no TCP connection to {address} within {timeout:g}s")
    except OSError as exc:
        return Attempt(UNREACHABLE, f"cannot connect to {address}: {exc.strerror or exc}")
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ctx.wrap_bio(incoming, outgoing, server_side=False)
    flight = _ServerFlight()
    failure: BaseException | None = None
    with sock:
        while True:
            try:
                tls.do_handshake()
                problem = check(tls) if check is not None else None
                if problem is not None:
                    return Attempt(INCONCLUSIVE, problem)
                if tls.version() == "TLSv1.3":
                    return _tls13_verdict(sock, tls, outgoing, incoming, deadline, timeout)
                return Attempt(ACCEPTED, f"handshake completed ({tls.version()})")
            except ssl.SSLWantReadError:
                pass
            except (ssl.SSLError, ValueError) as exc:
                failure = exc
                break
            try:
                pending = outgoing.read()
                if pending:
                    sock.sendall(pending)
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                sock.settimeout(left)
                data = sock.recv(16384)
            except TimeoutError:
                return _classify_silence(flight, timeout)
            except OSError as exc:
                failure = exc
                break
            if not data:
                failure = EOFError("closed the connection")
                break
            flight.feed(data)
            incoming.write(data)
    return _classify_failure(flight, failure)


def _tls13_verdict(
    sock: socket.socket,
    tls: ssl.SSLObject,
    outgoing: ssl.MemoryBIO,
    incoming: ssl.MemoryBIO,
    deadline: float,
    timeout: float,
) -> Attempt:
    """What the server did with our certificate (or its absence) after a TLS 1.3
    handshake: the client's last flight (its Certificate, empty or not, and Finished)
    is sent only now, and the server judges it on receipt.

    - an alert (certificate required, bad or unknown certificate...), or a close
      without one: REFUSED;
    - a session ticket (sent once the server completed its side of the handshake, so
      after it judged us) or application data: ACCEPTED;
    - the connection kept open and silent until the probe's deadline, at least half of
      the timeout after our flight: ACCEPTED, since a server that enforces mTLS answers a
      missing certificate at once; a shorter wait: INCONCLUSIVE.
    """
    flight_sent_at = None
    while True:
        try:
            if tls.read(1):
                return Attempt(ACCEPTED, "it sent data once the handshake was over")
        except ssl.SSLWantReadError:
            pass
        except ssl.SSLZeroReturnError:
            return Attempt(REFUSED, "it closed the connection after the TLS 1.3 handshake")
        except ssl.SSLError as exc:
            return Attempt(REFUSED, f"{_reason(exc)} (after the TLS 1.3 handshake)")
        session = tls.session
        if session is not None and session.has_ticket:
            return Attempt(ACCEPTED, "it sent a session ticket: it completed the handshake")
        try:
            pending = outgoing.read()
            if pending:
                sock.sendall(pending)
            if flight_sent_at is None:
                flight_sent_at = time.monotonic()
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            sock.settimeout(left)
            data = sock.recv(16384)
        except TimeoutError:
            waited = time.monotonic() - flight_sent_at if flight_sent_at else 0.0
            if waited >= timeout / 2:
                return Attempt(
                    ACCEPTED,
                    f"it kept the connection open {waited:.1f}s after the handshake, no alert",
                )
            return Attempt(INCONCLUSIVE, "no verdict on the client after the TLS 1.3 handshake")
        except OSError as exc:
            return Attempt(REFUSED, f"{_reason(exc)} (after the TLS 1.3 handshake)")
        if not data:
            return Attempt(REFUSED, "it closed the connection after the TLS 1.3 handshake")
        incoming.write(data)


def _classify_silence(flight: _ServerFlight, timeout: float) -> Attempt:
    if not flight.received:
        return Attempt(SILENT, f"no answer to a TLS ClientHello within {timeout:g}s")
    return Attempt(SILENT, f"the TLS handshake hung for {timeout:g}s")


def _classify_failure(flight: _ServerFlight, failure: BaseException | None) -> Attempt:
    why = _reason(failure) if failure is not None else "failed"
    if isinstance(failure, ssl.SSLCertVerificationError):  # our side, verifying Typha
        return Attempt(
            INCONCLUSIVE,
            f"Felix would refuse Typha's certificate: {failure.verify_message or why}",
        )
    if flight.not_tls:
        return Attempt(PLAIN, "it answered a TLS ClientHello with non-TLS bytes")
    if not flight.spoke_tls:
        if isinstance(failure, EOFError | ConnectionResetError | BrokenPipeError):
            return Attempt(
                PLAIN, "it closed the connection on a TLS ClientHello without a TLS answer"
            )
        return Attempt(INCONCLUSIVE, f"the TLS handshake failed: {why}")
    if not flight.asked_for_certificate:
        return Attempt(
            INCONCLUSIVE, f"Typha refused TLS 1.2 before asking for a client certificate: {why}"
        )
    return Attempt(REFUSED, why)


def _negative_context(version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2) -> ssl.SSLContext:
    """A client of one TLS version, which does not care who the server is."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = version
    ctx.maximum_version = version
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE  # who Typha is does not matter to a refusal
    return ctx


def _stranger_pem(felix_cert: Path) -> tuple[bytes, bytes]:
    """A leaf (PEM) and its key (PEM) from a throwaway CA, with the identity of this
    node's Felix certificate (else CN calico-node): only the CA differs."""
    from datetime import timedelta

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from typhapki.errors import ConfigError
    from typhapki.pki.pem import load_certs

    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "calico-node")])
    sans: list[x509.GeneralName] = []
    try:
        felix = load_certs(felix_cert, "Felix certificate")[0]
        subject = felix.subject
        ext = felix.extensions.get_extension_for_class(x509.SubjectAlternativeName)
        sans = [x509.UniformResourceIdentifier(u) for u in ext.value.get_values_for_type(
            x509.UniformResourceIdentifier)]  # fmt: skip
    except (ConfigError, x509.ExtensionNotFound, ValueError):
        pass
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "typhapki mTLS proof stranger")])
    key = ec.generate_private_key(ec.SECP256R1())
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    )
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    leaf = builder.sign(ca_key, hashes.SHA256())
    return (
        leaf.public_bytes(serialization.Encoding.PEM),
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        ),
    )


def _stranger_context(
    felix_cert: Path, version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2
) -> ssl.SSLContext:
    """The negative context with a certificate of another CA, loaded from memory files
    (memfd: never on disk)."""
    cert_pem, key_pem = _stranger_pem(felix_cert)
    ctx = _negative_context(version)
    fds = [os.memfd_create("typhapki-proof-cert"), os.memfd_create("typhapki-proof-key")]
    try:
        for fd, data in zip(fds, (cert_pem, key_pem), strict=True):
            os.write(fd, data)
        ctx.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
    finally:
        for fd in fds:
            os.close(fd)
    return ctx


def with_port(address: str, port: int | None) -> str:
    """`address` with `port` when it names none (HOST, [V6]); as it is otherwise."""
    text = address.strip()
    named = "]:" in text if text.startswith("[") else ":" in text
    return address if port is None or named else f"{text}:{port}"


def prove(
    address: str,
    out: Path,
    typha_identity: Identity,
    timeout: float,
    port: int | None = None,
) -> Proof:
    """Run the probes against the Typha at `address`, stopping at the first that decides.

    `typha_identity`: what Felix checks Typha against (FELIX_TYPHACN / URISAN). `port`:
    the Typha port of the live switch's stage, for an `address` that names none.

    The client without a certificate speaks TLS 1.2, then TLS 1.3; a Typha that takes
    it under either version enforces nothing. The other-CA client and this node's Felix
    then speak TLS 1.2 when Typha refused the certificate-less client under TLS 1.2,
    else TLS 1.3 when Typha refused TLS 1.2 outright (TLS_MIN_VERSION=1.3) and the
    certificate-less client under TLS 1.3 (an alert or a close after its handshake).
    """
    from typhapki.pki.layout import SetPaths
    from typhapki.pki.settings import RoleName

    address = with_port(address, port)
    no_cert = _handshake(address, _negative_context(), timeout)
    if no_cert.outcome in (ACCEPTED, PLAIN, UNREACHABLE, SILENT):
        return judge(address, no_cert, None, None)
    # The same client under TLS 1.3, whatever TLS 1.2 showed: a Typha seen accepting a
    # client without a certificate under any version does not enforce mTLS.
    tls13 = no_cert
    if ssl.HAS_TLSv1_3:  # an OpenSSL without TLS 1.3 cannot be offered it either
        tls13 = replace(
            _handshake(address, _negative_context(ssl.TLSVersion.TLSv1_3), timeout),
            version="TLS 1.3",
        )
    if tls13.outcome == ACCEPTED:
        return judge(address, tls13, None, None)
    version = ssl.TLSVersion.TLSv1_2
    if no_cert.outcome != REFUSED:
        if tls13 is no_cert or tls13.outcome != REFUSED:
            return judge(address, no_cert, None, None)
        # A TLS 1.3-only Typha: the rest of the proof speaks TLS 1.3.
        version, no_cert = ssl.TLSVersion.TLSv1_3, tls13
    stranger = _stranger_context(SetPaths(out).cert(RoleName.FELIX), version)
    other_ca = _handshake(address, stranger, timeout)
    if version is ssl.TLSVersion.TLSv1_3:
        other_ca = replace(other_ca, version="TLS 1.3")
    if other_ca.outcome != REFUSED:
        return judge(address, no_cert, other_ca, None)
    felix = _felix_attempt(address, out, typha_identity, timeout, version)
    return judge(address, no_cert, other_ca, felix)


def _felix_attempt(
    address: str,
    out: Path,
    typha: Identity,
    timeout: float,
    version: ssl.TLSVersion = ssl.TLSVersion.TLSv1_2,
) -> Attempt:
    """This node's Felix, as typhapki/monitoring/probe.py connects (its certificate and
    key, Typha's chain verified against the bundle for serverAuth, then Typha's CN or
    URI SAN), but over one TLS version and the bounded handshake: under TLS 1.2 a
    completed handshake is Typha's acceptance, with no wait for a late refusal; under
    TLS 1.3 (a Typha that speaks nothing else) the verdict after the handshake is
    (`_tls13_verdict`: a session ticket or data, else an alert or a close)."""
    from typhapki.errors import ConfigError
    from typhapki.pki.felix_tls import felix_context, typha_identity_error
    from typhapki.pki.layout import SetPaths

    try:
        ctx = felix_context(SetPaths(out), verify=True)
    except ConfigError as exc:
        return Attempt(INCONCLUSIVE, f"cannot act as this node's Felix: {exc}")
    ctx.minimum_version = version
    ctx.maximum_version = version

    def identity(tls: ssl.SSLObject) -> str | None:
        mismatch = typha_identity_error(dict(tls.getpeercert() or {}), typha)
        return None if mismatch is None else f"Felix would refuse Typha's identity: {mismatch}"

    return _handshake(address, ctx, timeout, identity)
