"""Who signs a node's certificates: the local CA, or a cfssl server over its API.

Every signer implements `Signer`: `current_ca()` names the CA that signs now (it goes
first in the bundle), `sign(csr, role)` returns a chain. Callers never ask which signer
they hold; `factory.build_signer` builds one from its typed settings.

A signer sees a CSR and a role, nothing else: the node makes its private keys itself
and they never leave it. What a signer returns is not trusted: `issuance.ensure_set`
judges it exactly as `check` would before anything is published, because a remote
signer signs whatever its profile allows (cfssl signs any CN unless the profile
restricts it).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from cryptography import x509

from typhapki.pki.settings import RoleName
from typhapki.record import field, record

if TYPE_CHECKING:
    from typing import Protocol
else:
    Protocol = object  # the interface, for the type checker; a plain base at run time


@record(frozen=True)
class CurrentCa:
    """The CA a signer signs with, and how far this run may rely on it.

    `confirmed`: read from the signer in this run (or from a local file); False when a
    remote signer did not answer and a cached CA stands in (`note` says since when).
    `anchors`: may become trusted without being in the live bundle already (a local CA
    file the admin placed). A remote signer's CA never may: a node trusts it only
    through a rotation stage (`--trust`), or, on an empty OUT, when `first_anchor`.
    `first_anchor`: the CA came over a channel good enough for a node's first trust
    anchor (TLS pinned by --cfssl-ca-file, or loopback).
    `lifetimes`: how long a remote signer's leaf lives, per role, as its profile says
    (cfssl's `info` reports the profile's `expiry`); empty for the local CA, which signs
    for the settings' lifetimes, and for a signer that did not say.
    """

    cert: x509.Certificate
    source: str = ""  # where it came from, for messages: a file, or the signer's URL
    confirmed: bool = True
    note: str | None = None
    anchors: bool = True
    first_anchor: bool = True
    lifetimes: Mapping[RoleName, timedelta] = field(default_factory=dict)


# How far this node's clock may run from a remote signer's before a refusal that
# depends on the time names the clocks: cfssl backdates a leaf's notBefore by 5
# minutes by default, so less than that never shows in what it signs.
CLOCK_TOLERANCE = timedelta(minutes=5)


@record(frozen=True)
class SignerClock:
    """This node's clock against a remote signer's, as one signed leaf shows it.

    `signer_time`: the signer's time (its answer's HTTP Date, else the leaf's notBefore
    plus cfssl's default backdating); `node_time`: this node's clock when the answer
    came; `how`: which of the two `signer_time` is, for messages.
    """

    signer_time: datetime
    node_time: datetime
    not_before: datetime
    how: str

    @property
    def ahead(self) -> timedelta:
        """How far this node's clock runs ahead of the signer's (negative: behind)."""
        return self.node_time - self.signer_time

    @property
    def skewed(self) -> bool:
        """Beyond CLOCK_TOLERANCE, either way."""
        return abs(self.ahead) > CLOCK_TOLERANCE


class Signer(Protocol):
    """Signs a CSR for a role with the settings' identity, EKU and lifetime."""

    @property
    def name(self) -> str:
        """Names the signer in messages: ``CA CN=...`` or ``cfssl https://...``."""
        ...

    def current_ca(self, refresh: bool = False) -> CurrentCa:
        """The CA that signs now; it goes first in the bundle. `refresh`: ask again
        whatever was cached (a signed leaf named another CA)."""
        ...

    def sign(self, csr: x509.CertificateSigningRequest, role: RoleName) -> list[x509.Certificate]:
        """The leaf for `csr` (first), plus any intermediates the signer sent with it."""
        ...

    def clock(self, leaf: x509.Certificate) -> SignerClock | None:
        """The signer's clock against this node's, as the answer that brought `leaf`
        shows it; None for a signer on this node's own clock (the local CA)."""
        ...
