"""The signer options (`--signer`, `--cfssl-*`) as given, before a signer is built.

The same settings can come from a hiera cluster's ``typha:`` mapping (signer,
cfssl_url, cfssl_profile_typha, cfssl_profile_felix, cfssl_label); the auth keys are
files on the node, named on the command line or in the node's config, never in hiera:
one for both profiles, or one per role when each profile has its own key
(docs/issuance.md, "A cfssl configuration that restricts each profile").
`typhapki.pki.signers.factory.build_signer` turns them into a signer. Each value
remembers where it came from (`sources`, typhapki/settings/provenance.py), so a
refusal names the flag, the node configuration file's key or the hiera key that set it.
"""

from __future__ import annotations

from pathlib import Path

from typhapki.record import field, fields, record
from typhapki.settings.provenance import Sourced, unset

TYPE_CHECKING = False  # `typing` is not imported at run time (typhapki/record.py)
if TYPE_CHECKING:
    from collections.abc import Mapping

SIGNERS = ("local", "cfssl")


@record(frozen=True)
class SignerOptions(Sourced):
    """Signer options as given; None means not given."""

    signer: str | None = None
    cfssl_url: str | None = None
    cfssl_auth_key: Path | None = None  # both roles' profiles
    cfssl_auth_key_typha: Path | None = None  # wins over cfssl_auth_key for Typha
    cfssl_auth_key_felix: Path | None = None  # wins over cfssl_auth_key for Felix
    cfssl_ca_file: Path | None = None
    cfssl_client_cert: str | None = None  # a file, or "puppet" (typhapki/puppet/agent_ssl.py)
    cfssl_client_key: Path | None = None  # the key of a client cert file
    cfssl_profile_typha: str | None = None
    cfssl_profile_felix: str | None = None
    cfssl_label: str | None = None
    cfssl_timeout: float | None = None
    cfssl_ca_ttl: str | None = None
    cfssl_allow_http: bool = False  # a flag only: never from hiera or the node's file
    # Where each value came from, as for the PKI options (typhapki/settings/pki.py): a
    # flag, the node configuration file's key, or hiera's file, line and key.
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def merged_over(self, base: SignerOptions) -> SignerOptions:
        """These options, falling back to `base` (e.g. hiera) where not given (None, or
        False for the one flag); each value keeps its source."""
        merged = {}
        sources = {}
        for name in OPTION_NAMES:
            chosen = base if unset(getattr(self, name)) else self
            merged[name] = getattr(chosen, name)
            if name in chosen.sources:
                sources[name] = chosen.sources[name]
        return SignerOptions(**merged, sources=sources)

    @property
    def kind(self) -> str:
        """local or cfssl; a misspelt signer is a usage error naming where it was set."""
        kind = self.signer or "local"
        if kind not in SIGNERS:
            self.refuse("signer", "expected local or cfssl")
        return kind

    def refuse_cfssl_options(self) -> None:
        """Refuse the first cfssl option given without the cfssl signer, naming it and
        where it came from (exit 2)."""
        for name in OPTION_NAMES:
            if name.startswith("cfssl_") and not unset(getattr(self, name)):
                if self.signer is None:
                    self.refuse(name, "needs --signer cfssl")
                self.refuse(name, f"needs --signer cfssl, but {self.said('signer')}")


OPTION_NAMES = tuple(f.name for f in fields(SignerOptions) if f.name != "sources")
