"""Certificate settings from a hiera cluster's ``typha:`` mapping, under the flags.

`issue`, `check` and `facts` accept ``--hiera PATH --cluster NAME``; the cluster's
settings fill in whatever the command line did not say (flags win), so a node's
Puppet code can pass two options instead of repeating every identity and lifetime.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from typhapki import options
from typhapki.errors import ConfigError, UsageError
from typhapki.provenance import existing
from typhapki.settings.pki import PkiOptions, build_settings, parse_roles

if TYPE_CHECKING:
    from typhapki.inventory.hiera import TyphaSettings
    from typhapki.pki.settings import PkiSettings, RoleName
    from typhapki.settings.signer import SignerOptions


def require_pair(hiera: Path | None, cluster: str | None) -> bool:
    """True when hiera settings are asked for; both options or neither (else exit 2)."""
    if (hiera is None) != (cluster is None):
        given, missing = ("--hiera", "--cluster") if cluster is None else ("--cluster", "--hiera")
        raise UsageError(f"{given} needs {missing}: give both or neither")
    return hiera is not None


def pki_options_of(typha: TyphaSettings) -> PkiOptions:
    """A cluster's ``typha:`` mapping as certificate options (None where not set), each
    remembering where hiera sets it."""
    from typhapki.inventory.hiera import CERTS

    typha.require(CERTS)  # a value the judge refused (typhapki/inventory/hiera.py)
    names = options.hiera_keys("pki")
    return PkiOptions(
        **{name: getattr(typha, name) for name in names},
        cluster_renew=typha.pki_renew_seconds,
        sources={n: f"hiera {typha.sources[n]}" for n in names if n in typha.sources},
    )


def load_typha_settings(hiera: Path | None, cluster: str | None) -> TyphaSettings | None:
    """The cluster's ``typha:`` settings, or None when no hiera was given. A value the
    judge refused stops only its reader (`TyphaSettings.require`: the certificate
    options here, the wiring's in typhapki/settings/wiring.py `resolve`): a bad
    firewall or wiring key never stops `issue` and `check`."""
    if not require_pair(hiera, cluster):
        return None
    assert hiera is not None and cluster is not None
    from typhapki.inventory.hiera import load_cluster  # yaml only when hiera is used

    existing("hiera", hiera, "hiera file or directory")
    return load_cluster(hiera, cluster, reads=()).typha  # each reader requires its own


def cluster_settings(
    flags: PkiOptions, hiera: Path | None, cluster: str | None
) -> tuple[PkiOptions, PkiSettings]:
    """The command-line options over the cluster's hiera settings (flags win), and the
    settings they make, built once."""
    return merge_pki(flags, load_typha_settings(hiera, cluster))


def merge_pki(flags: PkiOptions, typha: TyphaSettings | None) -> tuple[PkiOptions, PkiSettings]:
    """The certificate flags over one loaded ``typha:`` mapping (flags win), and the
    settings they make, built once (with the host's name looked up once); a value that
    is wrong only because of hiera is hiera's error (ConfigError, naming where)."""
    if typha is None:
        return flags, build_settings(flags)
    try:
        merged = flags.merged_over(pki_options_of(typha))
        return merged, build_settings(merged)
    except UsageError as exc:
        try:
            build_settings(flags)
        except UsageError:
            raise exc from None  # the flags are wrong on their own: their message
        # The hiera values are to blame: the message names where they are written
        # (each value's source), and the error is hiera's.
        raise ConfigError(str(exc)) from None


def merge_cluster(
    pki: PkiOptions, signer: SignerOptions, typha: TyphaSettings | None
) -> tuple[PkiOptions, PkiSettings, SignerOptions]:
    """Both option sets over one loaded ``typha:`` mapping (flags win), and the
    certificate settings, built once."""
    merged_pki, settings = merge_pki(pki, typha)
    if typha is None:
        return merged_pki, settings, signer
    return merged_pki, settings, merged_signer(signer, typha)


def signer_options_of(typha: TyphaSettings) -> SignerOptions:
    """A cluster's issuance mode from its ``typha:`` mapping (no secrets live there),
    each value remembering where hiera sets it."""
    from typhapki.inventory.hiera import CERTS
    from typhapki.settings.signer import SignerOptions

    typha.require(CERTS)
    names = options.hiera_keys("signer")
    return SignerOptions(
        **{name: getattr(typha, name) for name in names},
        sources={n: f"hiera {typha.sources[n]}" for n in names if n in typha.sources},
    )


def merged_signer(flags: SignerOptions, typha: TyphaSettings) -> SignerOptions:
    """The signer flags over the cluster's ``typha:``; with cfssl and no label from
    either, the cluster's ``pki_intermediate_base`` names the label: the fleet runs
    one intermediate per cluster, under that name (docs/issuance.md)."""
    merged = flags.merged_over(signer_options_of(typha))
    if not merged.labelled or merged.cfssl_label is not None:
        return merged
    base = typha.pki_intermediate_base
    if base is None:
        return merged
    from typhapki.inventory.hiera import cfssl_name_problem
    from typhapki.record import replace

    if (problem := cfssl_name_problem(base)) is not None:
        raise ConfigError(
            f"{typha.pki_intermediate_base_where}: the cfssl label when typha.cfssl_label "
            f"is not set: {problem}"
        )
    assert isinstance(base, str)
    where = {"cfssl_label": f"hiera {typha.pki_intermediate_base_where}"}
    return replace(merged, cfssl_label=base, sources={**merged.sources, **where})


def single_role_settings(
    opts: PkiOptions, hiera: Path | None, cluster: str | None, role: str, what: str
) -> tuple[PkiSettings, RoleName]:
    """The settings (flags over the cluster's hiera) and the one role WHAT is for
    (`request` and `sign`: a CSR or a certificate is for typha or felix, not both)."""
    settings = cluster_settings(opts, hiera, cluster)[1]
    roles = parse_roles(role)
    if len(roles) != 1:
        raise UsageError(f"--role: {what} is for one role, typha or felix")
    return settings, roles[0]
