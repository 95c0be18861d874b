"""The signer options (`--signer`, `--cfssl-*`) as given, before a signer is built.

The same settings can come from a hiera cluster's ``typha:`` mapping (signer,
cfssl_url, cfssl_profile_typha, cfssl_profile_felix, cfssl_label); the auth keys are
files on the node, named on the command line or in the node's config, never in hiera:
one for both profiles, or one per role when each profile has its own key
(docs/issuance.md, "A cfssl configuration that restricts each profile").
`typhapki.pki.signers.factory.build_signer` turns them into a signer.
"""

from __future__ import annotations

from pathlib import Path

from typhapki.errors import UsageError
from typhapki.record import fields, record

SIGNERS = ("local", "cfssl")


@record(frozen=True)
class SignerOptions:
    """Signer options as given on the command line; None means not given."""

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

    def merged_over(self, base: SignerOptions) -> SignerOptions:
        """These options, falling back to `base` (e.g. hiera) where not given."""
        return SignerOptions(
            **{
                name: getattr(self, name)
                if getattr(self, name) is not None
                else getattr(base, name)
                for name in _NAMES
            }
        )

    @property
    def kind(self) -> str:
        kind = self.signer or "local"
        if kind not in SIGNERS:
            raise UsageError(f"--signer: expected local or cfssl, got {kind!r}")
        return kind

    def given_cfssl(self) -> list[str]:
        """The --cfssl-* options that were given, as flags (for "needs --signer cfssl")."""
        return [
            f"--{name.replace('_', '-')}"
            for name in _NAMES
            if name.startswith("cfssl_") and getattr(self, name) not in (None, False)
        ]


_NAMES = tuple(f.name for f in fields(SignerOptions))
