"""Turning the certificate-related options into validated settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

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

T = TypeVar("T")
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
    """Certificate options as given; None means not given.

    `sources` remembers where each given value came from, for the error about a bad
    one: a flag (`--renew-before`), the node configuration file
    (`/etc/typhapki/typhapki.yaml, defaults.renew_before`) or hiera (`hiera FILE:LINE:
    KEY`); a value it does not name is a flag's (or the default).
    """

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
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def merged_over(self, base: PkiOptions) -> PkiOptions:
        """These options, falling back to `base` (e.g. hiera) where not given."""
        values: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for name in OPTION_NAMES:
            chosen = self if getattr(self, name) is not None else base
            values[name] = getattr(chosen, name)
            if name in chosen.sources:
                sources[name] = chosen.sources[name]
        return PkiOptions(**values, sources=sources)

    def source(self, name: str) -> str:
        """Where the value of `name` came from: its own flag unless `sources` says."""
        return self.sources.get(name, "--" + name.replace("_", "-"))


OPTION_NAMES = tuple(f for f in PkiOptions.__dataclass_fields__ if f != "sources")


def _named(opts: PkiOptions, names: Sequence[str], check: Callable[[], T]) -> T:
    """`check()`, whose UsageError about the values of `names` then names each value
    and where it came from: `renew_before '40d' (from --renew-before): ...`."""
    try:
        return check()
    except UsageError as exc:
        if not names:
            raise  # a default's problem (the node's name): the message says what to give
        said = ", ".join(f"{n} {getattr(opts, n)!r} (from {opts.source(n)})" for n in names)
        raise type(exc)(f"{said}: {exc}") from None


def build_settings(opts: PkiOptions) -> PkiSettings:
    settings = _build_settings(opts)
    if settings.renew_before is not None and settings.renew_before.days >= settings.days:
        days = f" (from {opts.source('days')})" if opts.days is not None else ""
        raise UsageError(
            f"renew_before {opts.renew_before!r} (from {opts.source('renew_before')}): "
            f"renew-before ({settings.renew_before.days} days) must be shorter than the leaf "
            f"lifetime ({settings.days} days{days}), or every certificate is due at once"
        )
    return settings


def _build_settings(opts: PkiOptions) -> PkiSettings:
    def named(check: Callable[[], T], *names: str) -> T:
        return _named(opts, [n for n in names if getattr(opts, n) is not None], check)

    return PkiSettings(
        typha=named(
            lambda: make_identity(opts.typha_cn, opts.typha_uri_san, DEFAULT_TYPHA_CN, "typha"),
            "typha_cn",
            "typha_uri_san",
        ),
        felix=named(
            lambda: make_identity(opts.felix_cn, opts.felix_uri_san, DEFAULT_FELIX_CN, "felix"),
            "felix_cn",
            "felix_uri_san",
        ),
        key_type=named(
            lambda: KeyType.parse(opts.key_type) if opts.key_type else KeyType.ECDSA_P256,
            "key_type",
        ),
        days=named(
            lambda: validate_days(opts.days if opts.days is not None else DEFAULT_LEAF_DAYS),
            "days",
        ),
        renew_before=named(
            lambda: (
                parse_duration(opts.renew_before, "renew-before") if opts.renew_before else None
            ),
            "renew_before",
        ),
        key_files=KeyFileOwnership(
            uid=named(lambda: resolve_uid(opts.key_owner, "key owner"), "key_owner"),
            gid=named(lambda: resolve_gid(opts.key_group, "key group"), "key_group"),
            mode=named(
                lambda: parse_key_mode(opts.key_mode) if opts.key_mode else 0o600, "key_mode"
            ),
        ),
        node_name=named(
            lambda: validate_node_name(
                opts.node_name if opts.node_name is not None else default_node_name()
            ),
            "node_name",
        ),
    )


def parse_roles(role: str) -> list[RoleName]:
    if role == "both":
        return [RoleName.TYPHA, RoleName.FELIX]
    try:
        return [RoleName(role)]
    except ValueError:
        raise UsageError(f"--role: expected typha, felix or both, got {role!r}") from None
