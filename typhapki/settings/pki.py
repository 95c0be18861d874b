"""Turning the certificate-related options into validated settings."""

from __future__ import annotations

from dataclasses import dataclass

from typhapki.errors import UsageError
from typhapki.pki.settings import (
    DEFAULT_FELIX_CN,
    DEFAULT_LEAF_DAYS,
    DEFAULT_TYPHA_CN,
    KeyFileOwnership,
    KeyType,
    PkiSettings,
    RoleName,
    make_identity,
    parse_duration,
    parse_key_mode,
    resolve_gid,
    resolve_uid,
    validate_days,
    validate_node_name,
)

LOCALHOST_NAMES = frozenset({"localhost", "localhost4", "localhost6", "ip6-localhost"})


def default_node_name() -> str:
    """The host's FQDN, as Puppet names the node (Facter's fqdn), else its host name.

    Never `localhost`: every node whose name resolves so would share one renewal moment
    and restart Typha in the same Puppet run (the spread of settings.renewal_moment)."""
    import socket

    for name in (socket.getfqdn(), socket.gethostname()):
        if name and name.split(".")[0].lower() not in LOCALHOST_NAMES:
            return name
    raise UsageError(
        "this node's name is localhost, which would renew at the same moment as every "
        "other such node: give --node-name (its FQDN) or fix the host name"
    )


@dataclass(frozen=True)
class PkiOptions:
    """Certificate options as given on the command line; None means not given."""

    typha_cn: str | None = None
    felix_cn: str | None = None
    typha_uri_san: str | None = None
    felix_uri_san: str | None = None
    key_type: str | None = None
    days: int | None = None
    renew_before: str | None = None
    key_owner: str | None = None
    key_group: str | None = None
    key_mode: str | None = None
    node_name: str | None = None  # never from hiera: it is this node's own

    def merged_over(self, base: PkiOptions) -> PkiOptions:
        """These options, falling back to `base` (e.g. hiera) where not given."""
        return PkiOptions(
            **{
                name: getattr(self, name)
                if getattr(self, name) is not None
                else getattr(base, name)
                for name in self.__dataclass_fields__
            }
        )


def build_settings(opts: PkiOptions) -> PkiSettings:
    settings = _build_settings(opts)
    if settings.renew_before is not None and settings.renew_before.days >= settings.days:
        raise UsageError(
            f"renew-before ({settings.renew_before.days} days) must be shorter than the leaf "
            f"lifetime ({settings.days} days), or every certificate is due at once"
        )
    return settings


def _build_settings(opts: PkiOptions) -> PkiSettings:
    return PkiSettings(
        typha=make_identity(opts.typha_cn, opts.typha_uri_san, DEFAULT_TYPHA_CN, "typha"),
        felix=make_identity(opts.felix_cn, opts.felix_uri_san, DEFAULT_FELIX_CN, "felix"),
        key_type=KeyType.parse(opts.key_type) if opts.key_type else KeyType.ECDSA_P256,
        days=validate_days(opts.days if opts.days is not None else DEFAULT_LEAF_DAYS),
        renew_before=(
            parse_duration(opts.renew_before, "renew-before") if opts.renew_before else None
        ),
        key_files=KeyFileOwnership(
            uid=resolve_uid(opts.key_owner, "key owner"),
            gid=resolve_gid(opts.key_group, "key group"),
            mode=parse_key_mode(opts.key_mode) if opts.key_mode else 0o600,
        ),
        node_name=validate_node_name(
            opts.node_name if opts.node_name is not None else default_node_name()
        ),
    )


def parse_roles(role: str) -> list[RoleName]:
    if role == "both":
        return [RoleName.TYPHA, RoleName.FELIX]
    try:
        return [RoleName(role)]
    except ValueError:
        raise UsageError(f"--role: expected typha, felix or both, got {role!r}") from None
