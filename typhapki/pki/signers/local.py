"""The local CA as a signer: `typhaca.key` on this host (labs, bootstrap, admin hosts)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography import x509

from typhapki.errors import ConfigError, RefusedError, UsageError
from typhapki.pki.layout import CaPaths
from typhapki.pki.profiles import Issuer, build_leaf
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.signers import CurrentCa, SignerClock
from typhapki.pki.x509compat import valid_until
from typhapki.record import record

if TYPE_CHECKING:
    from typhapki.pki.signers.factory import Context, GivenOptions


def leaf_not_after(
    issuer: Issuer, settings: PkiSettings, now: datetime, role: RoleName
) -> datetime:
    """The role's lifetime (--typha-lifetime, --felix-lifetime, --days) from now, clamped
    to its CA; refused when even that would be due for renewal at once."""
    wanted = now + settings.lifetime(role)
    ca_end = valid_until(issuer.cert)
    not_after = min(wanted, ca_end)
    lifetime = not_after - now
    window = settings.renew_window(settings.lifetime(role))
    if lifetime <= window:
        left = (ca_end - now).total_seconds() / 86400
        raise RefusedError(
            f"CA {issuer.cert.subject.rfc4514_string()} expires {ca_end:%Y-%m-%d} "
            f"({left:.1f} days left): a leaf issued now would already be due for renewal. "
            "Rotate the CA first (docs/rotation.md)"
        )
    return not_after


class LocalSigner:
    """Signs with a CA certificate and key loaded from a CA directory.

    Identity, EKU and lifetime come from the settings; from a CSR only the public key
    is taken (and only after its signature verified, see `csr.parse_csr`). Give either
    an `issuer` (certificate and key in memory) or a `ca_dir`: then the certificate is
    read for `current_ca()` and the key only when something is signed, so judging a
    set (`check`, an `issue` with nothing to do) never needs the CA key.
    """

    def __init__(
        self,
        issuer: Issuer | None = None,
        settings: PkiSettings | None = None,
        now: datetime | None = None,
        ca_dir: Path | None = None,
    ) -> None:
        if (issuer is None) == (ca_dir is None):
            raise ValueError("LocalSigner takes an issuer or a ca_dir")
        self._issuer = issuer
        self.ca_dir = ca_dir
        self.settings = settings or PkiSettings()
        self.now = now
        self._ca: x509.Certificate | None = issuer.cert if issuer is not None else None

    @property
    def name(self) -> str:
        return f"CA {self.current_ca().cert.subject.rfc4514_string()}"

    @property
    def issuer(self) -> Issuer:
        """The CA certificate and key, loaded and checked on first use."""
        if self._issuer is None:
            from typhapki.pki.issuance import load_issuer

            assert self.ca_dir is not None
            self._issuer = load_issuer(self.ca_dir)
        return self._issuer

    def current_ca(self, refresh: bool = False) -> CurrentCa:
        if self._ca is None:
            from typhapki.pki.pem import load_certs
            from typhapki.pki.verify import is_ca

            assert self.ca_dir is not None
            if not self.ca_dir.is_dir():
                raise ConfigError(f"{self.ca_dir}: CA directory does not exist")
            path = CaPaths(self.ca_dir).cert
            cert = load_certs(path, "CA certificate")[0]
            if not is_ca(cert):
                raise ConfigError(f"{path}: not a CA certificate (basicConstraints CA:FALSE)")
            self._ca = cert
        source = (
            str(CaPaths(self.ca_dir).cert)
            if self.ca_dir is not None
            else f"CA {self._ca.subject.rfc4514_string()}"
        )
        return CurrentCa(self._ca, source)

    def sign(self, csr: x509.CertificateSigningRequest, role: RoleName) -> list[x509.Certificate]:
        issuer = self.issuer
        now = self.now or datetime.now(UTC)
        not_after = leaf_not_after(issuer, self.settings, now, role)
        public = csr.public_key()
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        assert isinstance(public, ec.EllipticCurvePublicKey | rsa.RSAPublicKey)
        identity = self.settings.identity(role)
        return [build_leaf(issuer, public, role, identity, not_after, now)]

    def clock(self, leaf: x509.Certificate) -> SignerClock | None:
        """None: the local CA signs by this node's own clock."""
        return None


@record(frozen=True)
class LocalConfig:
    """The local CA's settings: its directory (certificate and key, typhapki/pki/layout.py)."""

    ca_dir: Path
    kind = "local"  # its name in typhapki/pki/signers/factory.py SIGNERS


def config(opts: GivenOptions, context: Context) -> LocalConfig:
    """The local CA's settings: its directory, --ca-dir (typhapki/pki/signers/factory.py:
    its check of its options)."""
    if context.ca_dir is None:
        if opts.signer is not None:
            opts.refuse("signer", "needs --ca-dir (the local CA's directory)")
        raise UsageError("--ca-dir is required with --signer local (the default)")
    return LocalConfig(ca_dir=context.ca_dir)


def signer(config: LocalConfig, settings: PkiSettings, now: datetime | None) -> LocalSigner:
    """The local CA as `config` names it (typhapki/pki/signers/factory.py)."""
    return LocalSigner(settings=settings, now=now, ca_dir=config.ca_dir)
