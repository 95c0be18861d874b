"""Issuing with the local CA in tests: `issuance.ensure_set` takes any signer; tests
mostly hold an Issuer (a CA certificate and key) and a clock to sign at."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from cryptography import x509

from typhapki.pki.issuance import Change, ensure_set
from typhapki.pki.profiles import Issuer
from typhapki.pki.settings import PkiSettings, RoleName
from typhapki.pki.signers.local import LocalSigner


def ensure_local(
    out: Path,
    issuer: Issuer,
    settings: PkiSettings,
    roles: Sequence[RoleName],
    trusted: Sequence[x509.Certificate] = (),
    now: datetime | None = None,
    keep_leaves: bool = False,
) -> list[Change]:
    """`ensure_set` with `issuer` as the signer, signing at `now` with `settings`."""
    signer = LocalSigner(issuer, settings, now)
    return ensure_set(out, signer, settings, roles, trusted, now, keep_leaves)
