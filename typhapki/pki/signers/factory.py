"""The one place that turns a signer's typed settings into the signer.

Each signer is a module under typhapki/pki/signers/ holding its settings record (whose
`kind` names it) and `signer(config, settings, now)`, which builds it; SIGNERS maps the
kind to that module, imported only when that signer is built. Adding a signer is its
module plus one line here (docs/architecture.md, "Adding a signer"). The settings come
from the options in typhapki/settings/signer.py `signer_config`.
"""

from __future__ import annotations

from datetime import datetime
from importlib import import_module

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typhapki.pki.settings import PkiSettings
    from typhapki.pki.signers import Signer
    from typhapki.pki.signers.cfssl import CfsslConfig
    from typhapki.pki.signers.local import LocalConfig

    SignerConfig = LocalConfig | CfsslConfig

SIGNERS = {
    "local": "typhapki.pki.signers.local",
    "cfssl": "typhapki.pki.signers.cfssl",
}


def build_signer(
    config: SignerConfig, settings: PkiSettings, now: datetime | None = None
) -> Signer:
    """The signer `config` describes, for certificates as `settings` say. Nothing is
    read or asked here: the CA and the signer's answers come when the signer is used."""
    module = import_module(SIGNERS[config.kind])
    signer: Signer = module.signer(config, settings, now)
    return signer
