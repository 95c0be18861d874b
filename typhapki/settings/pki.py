"""Turning the certificate-related options into validated settings."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from typing import TYPE_CHECKING

from typhapki.errors import ConfigError, UsageError
from typhapki.numbers import whole_number
from typhapki.options import PkiFields
from typhapki.pki.settings import (
    DEFAULT_FELIX_CN,
    DEFAULT_LEAF_LIFETIME,
    DEFAULT_TYPHA_CN,
    KeyFileOwnership,
    KeyType,
    PkiSettings,
    RoleName,
    check_renewal,
    make_identity,
    parse_duration,
    parse_key_mode,
    resolve_gid,
    resolve_uid,
    validate_days,
    validate_node_name,
)
from typhapki.provenance import OptionError, Sourced
from typhapki.provenance import named as _named
from typhapki.record import field, fields, record

if TYPE_CHECKING:
    from typing import Any, TypeVar

    T = TypeVar("T")

# Options that set a leaf's lifetime: --days sets both roles', each of the others one.
LIFETIME_OPTIONS = ("days", "typha_lifetime", "felix_lifetime")

LOCALHOST_NAMES = frozenset({"localhost", "localhost4", "localhost6", "ip6-localhost"})


def fqdn() -> str:
    """`socket.getfqdn()`, asking with the host name as bytes where it is ASCII: for a
    str, CPython loads the idna codec first (about 1 ms of every `check` and `facts`)."""
    import socket

    name = socket.gethostname()
    try:
        asked = name.encode("ascii")
    except UnicodeEncodeError:
        return socket.getfqdn()
    try:
        # CPython takes bytes as it takes str (typeshed lists only str).
        hostname, aliases, _ = socket.gethostbyaddr(asked)  # type: ignore[arg-type]
    except OSError:
        return name
    return next((alias for alias in (hostname, *aliases) if "." in alias), hostname)


def default_node_name() -> str:
    """The host's FQDN, as Puppet names the node (Facter's fqdn), else its host name.

    Never `localhost`: every node whose name resolves so would share one renewal moment
    and restart Typha in the same Puppet run (the spread of settings.renewal_moment)."""
    import socket

    for name in (fqdn(), socket.gethostname()):
        if name and name.split(".")[0].lower() not in LOCALHOST_NAMES:
            return name
    raise UsageError(
        "this node's name is localhost, which would renew at the same moment as every "
        "other such node: give --node-name (its FQDN) or fix the host name"
    )


@record(frozen=True)
class PkiOptions(PkiFields, Sourced):
    """Certificate options as given on the command line; None means not given.

    The options are the fields of `PkiFields` (typhapki/options.py), declared
    there once with their flags and help; this record adds what no flag sets."""

    # Not an option: the cluster's pki_renew_seconds from hiera (kubernetes::clusters).
    cluster_renew: int | None = None
    # Where each value came from ("--days", "/etc/typhapki/typhapki.yaml: ...", "hiera
    # FILE:LINE: KEY"); a value without an entry came from its own flag
    # (typhapki/provenance.py).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def lifetimes(self) -> tuple[str | None, str | None]:
        """Typha's and Felix's lifetime as given (--days stands for both); None: not
        given. --days with a per-role lifetime is a usage error naming both."""
        if self.days is not None:
            for name in ("typha_lifetime", "felix_lifetime"):
                if getattr(self, name) is not None:
                    raise UsageError(
                        f"{self.source('days')} and {self.source(name)} exclude each "
                        "other: --days sets both lifetimes"
                    )
            return f"{self.days}d", f"{self.days}d"
        return self.typha_lifetime, self.felix_lifetime

    def merged_over(self, base: PkiOptions) -> PkiOptions:
        """These options, falling back to `base` (e.g. hiera) where not given.

        Lifetimes merge per role: a flag's --felix-lifetime wins over hiera's days for
        Felix, and Typha keeps hiera's. The cluster's pki_renew_seconds, which no flag
        sets, is kept from whichever side carries it: dropping it here made hiera's
        renewal window act nowhere (docs/issuance.md, "Renewal").
        """
        merged: dict[str, Any] = {
            "cluster_renew": (
                self.cluster_renew if self.cluster_renew is not None else base.cluster_renew
            )
        }
        sources: dict[str, str] = {}
        for name in OPTION_NAMES:
            if name in LIFETIME_OPTIONS:
                continue
            chosen = self if getattr(self, name) is not None else base
            merged[name] = getattr(chosen, name)
            if name in chosen.sources:
                sources[name] = chosen.sources[name]
        mine, theirs = self.lifetimes(), base.lifetimes()
        for i, name in enumerate(("typha_lifetime", "felix_lifetime")):
            chosen = self if mine[i] is not None else base
            merged[name] = mine[i] if mine[i] is not None else theirs[i]
            given = name if getattr(chosen, name) is not None else "days"
            if getattr(chosen, given) is not None:
                sources[name] = chosen.source(given)
        return PkiOptions(**merged, sources=sources)


OPTION_NAMES = tuple(f.name for f in fields(PkiFields))


def build_settings(opts: PkiOptions) -> PkiSettings:
    """The options validated into settings. A renewal window as long as a lifetime is
    refused where the signer is known (`check_local_renewal`, settings.desired.resolve):
    cfssl's profile decides its lifetime, not these settings' defaults."""
    return _build_settings(opts)


def check_local_renewal(
    settings: PkiSettings, roles: Sequence[RoleName], opts: PkiOptions | None = None
) -> None:
    """Where the local CA signs (`issue --ca-dir`, `sign`): --renew-before must be
    shorter than each role's lifetime, or every certificate is due at once (exit 2).
    With `opts`, the error names where renew_before came from."""
    for role in roles:
        lifetime, what = settings.lifetime(role), f"the {role.value} lifetime"
        if opts is None or opts.renew_before is None:
            check_renewal(settings, lifetime, what)
        else:
            _named(opts, ["renew_before"], partial(check_renewal, settings, lifetime, what))


def _lifetime(value: str | int | None, flag: str) -> timedelta:
    if value is None:
        return DEFAULT_LEAF_LIFETIME
    if isinstance(value, str) and value.endswith("d"):
        try:  # plain digits and a d: --days' own bounds and words
            days = whole_number(value[:-1], low=0, high=10**9, what=flag)
        except ConfigError:
            days = None  # parse_duration says what is wrong with it
        if days is not None:
            validate_days(days, flag)
    return parse_duration(value, flag)


def _build_settings(opts: PkiOptions) -> PkiSettings:
    def named(check: Callable[[], T], *names: str) -> T:
        return _named(opts, [n for n in names if getattr(opts, n) is not None], check)

    if opts.days is not None:
        named(partial(validate_days, opts.days), "days")
    typha_lifetime, felix_lifetime = opts.lifetimes()
    cluster_renew = opts.cluster_renew
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
        typha_lifetime=named(
            lambda: _lifetime(typha_lifetime, "--typha-lifetime"), "typha_lifetime", "days"
        ),
        felix_lifetime=named(
            lambda: _lifetime(felix_lifetime, "--felix-lifetime"), "felix_lifetime", "days"
        ),
        renew_before=named(
            lambda: (
                parse_duration(opts.renew_before, "renew-before") if opts.renew_before else None
            ),
            "renew_before",
        ),
        cluster_renew=(
            parse_duration(cluster_renew, "pki_renew_seconds")
            if cluster_renew is not None
            else None
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
        raise OptionError("role", role, "expected typha, felix or both") from None
