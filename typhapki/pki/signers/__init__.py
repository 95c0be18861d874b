"""Who signs a node's certificates: the local CA, or a cfssl server over its API.

A signer sees a CSR and a role, nothing else: the node makes its private keys itself
and they never leave it. What a signer returns is not trusted: `issuance.ensure_set`
judges it exactly as `check` would before anything is published, because a remote
signer signs whatever its profile allows (cfssl signs any CN unless the profile
restricts it).
"""

from __future__ import annotations

from typing import Protocol

from cryptography import x509

from typhapki.pki.settings import RoleName


class Signer(Protocol):
    """Signs a CSR for a role with the settings' identity, EKU and lifetime."""

    @property
    def name(self) -> str:
        """Names the signer in messages: ``CA CN=...`` or ``cfssl https://...``."""
        ...

    def signing_ca(self) -> x509.Certificate:
        """The CA that signs now; it goes first in the bundle."""
        ...

    def sign(self, csr: x509.CertificateSigningRequest, role: RoleName) -> list[x509.Certificate]:
        """The leaf for `csr` (first), plus any intermediates the signer sent with it."""
        ...
