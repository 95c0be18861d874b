"""Turning the signer options (`--signer`, `--cfssl-*`) into a signer.

The same settings can come from a hiera cluster's ``typha:`` mapping (signer,
cfssl_url, cfssl_profile_typha, cfssl_profile_felix, cfssl_label); the auth key is a
file on the node, named on the command line or in the node's config, never in hiera.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.errors import UsageError

if TYPE_CHECKING:
    from typhapki.pki.profiles import Issuer
    from typhapki.pki.signers import Signer

SIGNERS = ("local", "cfssl")


@dataclass(frozen=True)
class SignerOptions:
    """Signer options as given on the command line; None means not given."""

    signer: str | None = None
    cfssl_url: str | None = None
    cfssl_auth_key: Path | None = None
    cfssl_ca_file: Path | None = None
    cfssl_profile_typha: str | None = None
    cfssl_profile_felix: str | None = None
    cfssl_label: str | None = None
    cfssl_timeout: float | None = None

    def merged_over(self, base: SignerOptions) -> SignerOptions:
        """These options, falling back to `base` (e.g. hiera) where not given."""
        return SignerOptions(
            **{
                name: getattr(self, name)
                if getattr(self, name) is not None
                else getattr(base, name)
                for name in self.__dataclass_fields__
            }
        )

    @property
    def kind(self) -> str:
        kind = self.signer or "local"
        if kind not in SIGNERS:
            raise UsageError(f"--signer: expected local or cfssl, got {kind!r}")
        return kind


def build_signer(opts: SignerOptions, ca_dir: Path | None) -> Signer | Issuer:
    """The local CA's issuer (`--ca-dir`) or a cfssl client, as the options say."""
    if opts.kind == "local":
        given = [
            f"--{name.replace('_', '-')}"
            for name in opts.__dataclass_fields__
            if name.startswith("cfssl_") and getattr(opts, name) is not None
        ]
        if given:
            raise UsageError(f"{given[0]} needs --signer cfssl")
        if ca_dir is None:
            raise UsageError("--ca-dir is required with --signer local (the default)")
        from typhapki.pki.issuance import load_issuer

        return load_issuer(ca_dir)
    if ca_dir is not None:
        raise UsageError("--ca-dir and --signer cfssl exclude each other: cfssl holds the CA")
    if not opts.cfssl_url:
        raise UsageError("--signer cfssl needs --cfssl-url (or cfssl_url in hiera)")
    if opts.cfssl_timeout is not None and not 0 < opts.cfssl_timeout <= 300:
        raise UsageError(f"--cfssl-timeout: expected 0-300 seconds, got {opts.cfssl_timeout}")
    from typhapki.pki.settings import RoleName
    from typhapki.pki.signers.cfssl import DEFAULT_TIMEOUT, CfsslConfig, CfsslSigner

    for name, profile in (
        ("typha", opts.cfssl_profile_typha),
        ("felix", opts.cfssl_profile_felix),
    ):
        if profile is not None and not profile.strip():
            raise UsageError(f"--cfssl-profile-{name}: must not be empty")
    config = CfsslConfig(
        url=opts.cfssl_url,
        profiles={
            RoleName.TYPHA: opts.cfssl_profile_typha or "typha",
            RoleName.FELIX: opts.cfssl_profile_felix or "felix",
        },
        label=opts.cfssl_label or "",
        auth_key_file=opts.cfssl_auth_key,
        ca_file=opts.cfssl_ca_file,
        timeout=opts.cfssl_timeout if opts.cfssl_timeout is not None else DEFAULT_TIMEOUT,
    )
    return CfsslSigner(config)
