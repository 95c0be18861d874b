"""The local CA as a signer: `typhaca.key` on this host (labs, bootstrap, admin hosts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from cryptography import x509

from typhapki.errors import RefusedError
from typhapki.pki.profiles import Issuer, build_leaf
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.x509compat import valid_until


def leaf_not_after(issuer: Issuer, settings: PkiSettings, now: datetime) -> datetime:
    """Clamp the leaf to its CA, and refuse when even that would be due at once."""
    wanted = now + timedelta(days=settings.days)
    ca_end = valid_until(issuer.cert)
    not_after = min(wanted, ca_end)
    lifetime = not_after - now
    window = settings.renew_window(timedelta(days=settings.days))
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
    is taken (and only after its signature verified, see `csr.parse_csr`).
    """

    def __init__(self, issuer: Issuer, settings: PkiSettings, now: datetime | None = None):
        self.issuer = issuer
        self.settings = settings
        self.now = now

    @property
    def name(self) -> str:
        return f"CA {self.issuer.cert.subject.rfc4514_string()}"

    def signing_ca(self) -> x509.Certificate:
        return self.issuer.cert

    def sign(self, csr: x509.CertificateSigningRequest, role: RoleName) -> list[x509.Certificate]:
        now = self.now or datetime.now(UTC)
        not_after = leaf_not_after(self.issuer, self.settings, now)
        public = csr.public_key()
        from cryptography.hazmat.primitives.asymmetric import ec, rsa

        assert isinstance(public, ec.EllipticCurvePublicKey | rsa.RSAPublicKey)
        identity = self.settings.identity(role)
        return [build_leaf(self.issuer, public, role, identity, not_after, now)]
