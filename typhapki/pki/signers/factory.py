"""The one place that turns a signer's typed settings into the signer.

Each signer is a module under typhapki/pki/signers/ holding its settings record (whose
`kind` names it) and `signer(config, settings, now)`, which builds it; SIGNERS maps the
kind to that module, imported only when that signer is built, and says what depends on
which signer it is (`Kind`), so nothing else decides by a signer's name. Adding a
signer is its module plus one line here, its options in typhapki/options.py
and their check in typhapki/settings/signer.py (docs/architecture.md, "Adding a
signer"). The settings come from the options in typhapki/settings/signer.py
`signer_config`.
"""

from __future__ import annotations

from datetime import datetime
from importlib import import_module
from typing import TYPE_CHECKING

from typhapki.record import record

if TYPE_CHECKING:
    from typing import Protocol

    from typhapki.pki.settings import PkiSettings
    from typhapki.pki.signers import Signer

    class SignerConfig(Protocol):
        """A signer's typed settings: a record whose `kind` names its line in SIGNERS."""

        @property
        def kind(self) -> str: ...


@record(frozen=True)
class Kind:
    """One signer: its module, and what depends on which signer it is.

    `caches_ca`: a remote signer, whose CA `check` and `issue` cache and `facts`,
    `metrics` and `check --nagios` read from that cache, never asking it
    (typhapki/pki/signers/ca_cache.py). `labelled`: a label picks its CA; with none
    given, the cluster's pki_intermediate_base names it (typhapki/settings/cluster.py).
    """

    module: str
    caches_ca: bool = False
    labelled: bool = False


SIGNERS = {
    "local": Kind("typhapki.pki.signers.local"),
    "cfssl": Kind("typhapki.pki.signers.cfssl", caches_ca=True, labelled=True),
}


def build_signer(
    config: SignerConfig, settings: PkiSettings, now: datetime | None = None
) -> Signer:
    """The signer `config` describes, for certificates as `settings` say. Nothing is
    read or asked here: the CA and the signer's answers come when the signer is used."""
    module = import_module(SIGNERS[config.kind].module)
    signer: Signer = module.signer(config, settings, now)
    return signer
