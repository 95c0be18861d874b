"""Flags, the node configuration file, hiera and defaults resolved into one desired state.

The node configuration file reaches the commands as click's defaults (typhapki/cli/typer_app.py),
so by the time a command runs its options hold flags over the file; this module puts
the cluster's hiera under them (loaded once), validates the result into settings, builds
the signer and asks it for its current CA. `check`, `issue` and `install` all call
`resolve`, so they judge the set by the same desired state (typhapki/pki/plan.py).

`facts`, `metrics` and `check --nagios` call `observe`: the same resolution (hiera loaded
once, the same merge, the same trust list, `typha.trust` included), except that it asks
no signer and keeps every failure instead of raising it, so monitoring can still
describe the set (typhapki/monitoring/status.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.pki.settings import check_renewal
from typhapki.provenance import existing
from typhapki.record import record
from typhapki.settings.cluster import load_typha_settings, merge_cluster, merge_pki, merged_signer
from typhapki.settings.pki import PkiOptions, check_local_renewal, parse_roles
from typhapki.settings.signer import SignerOptions

if TYPE_CHECKING:
    from collections.abc import Sequence

    from cryptography import x509

    from typhapki.inventory.hiera import TyphaSettings
    from typhapki.pki.plan import Desired
    from typhapki.pki.settings import PkiSettings, RoleName
    from typhapki.pki.signers import CurrentCa, Signer


@record(frozen=True)
class Request:
    """What a command was asked, before resolution: the options as given."""

    out: Path
    role: str
    pki: PkiOptions
    signer: SignerOptions
    ca_dir: Path | None = None
    trust: tuple[Path, ...] = ()
    hiera: Path | None = None
    cluster: str | None = None
    source: Path | None = None  # shipped mode: `--from DIR`
    # --state-dir or the node configuration's state_dir as given (None: not given);
    # `state_root` resolves it once per run (typhapki/firewall/state.py `state_dir`).
    state_dir: Path | None = None
    # The emergency CA roll's new CA in local CA mode (docs/rotation.md).
    new_ca_dir: Path | None = None


def hiera_trusted(typha: TyphaSettings | None) -> tuple[x509.Certificate, ...]:
    """The cluster's ``typha.trust`` CAs (checked when hiera was read), after --trust's."""
    if typha is None:
        return ()
    from typhapki.inventory.hiera import CERTS

    typha.require(CERTS)
    if not typha.trust:
        return ()
    from typhapki.pki.pem import parse_certs

    return tuple(c for pem in typha.trust for c in parse_certs(pem.encode(), "typha.trust"))


def state_root(given: Path | None) -> Path:
    """The state directory of this run, resolved once: --state-dir, else the node
    configuration's state_dir (both arrive as the option's value, flags winning), else
    $TYPHAPKI_STATE_DIR, else /var/lib/typhapki. Every reader of the run (the signer-CA
    cache, ferm.json) is handed this one path."""
    from typhapki.statedir import state_dir

    return state_dir(given)


def checked_signer(
    signer: SignerOptions,
    ca_dir: Path | None,
    settings: PkiSettings,
    pki: PkiOptions,
    roles: tuple[RoleName, ...],
    state_dir: Path,
    require_signer: bool,
) -> Signer | None:
    """The signer the options name, refused (exit 2) as `check` and `issue` refuse it,
    asked nothing; None when they name none and none is required (`check --out` alone
    judges the set by its own bundle). `resolve` and `observe` both call it, so the
    fact, the metrics and `check --nagios` refuse what `check` refuses."""
    from typhapki.pki.signers.factory import build_signer
    from typhapki.settings.signer import signer_config

    if not require_signer and ca_dir is None and signer.local:
        signer.refuse_other_signers_options()  # as signer_config would, in check as in issue
        return None
    # A renewal window as long as the lifetime would renew on every run: the local CA
    # signs for the settings' lifetimes, a remote signer for its profile's.
    if ca_dir is not None:
        check_local_renewal(settings, roles, pki)
    config = signer_config(signer, ca_dir, settings.node_name, state_dir, roles)
    return build_signer(config, settings)


def check_signer_renewal(
    settings: PkiSettings, current: CurrentCa, roles: Sequence[RoleName], name: str
) -> None:
    """A renewal window as long as the lifetime the signer signs for (cfssl: its
    profile's expiry) would reissue on every run: refused (exit 2), by `check` and
    `issue` (`resolve`) as by monitoring judging the cached CA
    (typhapki/monitoring/status.py `judge_set`)."""
    if current.anchors:
        return
    for role, lifetime in current.lifetimes.items():
        if role in roles:
            check_renewal(settings, lifetime, f"the {role.value} lifetime ({name})")


def resolve(request: Request, require_signer: bool, ask_signer: bool = True) -> Desired:
    """The desired state of the set under `request.out`.

    `require_signer`: `issue` cannot work without one (exit 2); `check` without one judges
    the set by its own bundle. `ask_signer` False builds the signer without asking for its
    CA (nothing in the desired state depends on the signer then).
    """
    typha = load_typha_settings(request.hiera, request.cluster)  # hiera read once
    return resolve_loaded(request, typha, require_signer, ask_signer)


def resolve_each(
    request: Request, require_signer: bool, ask_signer: bool = True
) -> tuple[Desired, ...]:
    """`resolve`, one desired state per group of roles one signer signs: one, except at
    the emergency's step typha-leaf (docs/rotation.md), where the new CA signs Typha's
    leaf and the old one Felix's; both want the same bundle (old + new). `issue` and
    `check` judge and carry out each in turn."""
    from typhapki.pki import emergency as roll
    from typhapki.record import replace

    typha = load_typha_settings(request.hiera, request.cluster)  # hiera read once
    emergency = typha.emergency if typha is not None else None
    roles = tuple(parse_roles(request.role))
    if emergency is None or request.source is not None:
        return (resolve_loaded(request, typha, require_signer, ask_signer),)
    sides: dict[str, list[RoleName]] = {}
    for role in roles:
        sides.setdefault(roll.signer_side(emergency.step, role.value), []).append(role)
    if len(sides) == 1:
        return (resolve_loaded(request, typha, require_signer, ask_signer),)
    return tuple(
        resolve_loaded(replace(request, role=group[0].value), typha, require_signer, ask_signer)
        for group in sides.values()
    )


SHIPPED_EMERGENCY = (
    "typha.emergency: shipped sets are made on the admin host: run the emergency's steps "
    "there, on the central signer (typhapki issue --ca-dir/--trust per step, "
    "docs/rotation.md), and ship each step's set"
)


def _emergency_signing(
    request: Request,
    typha: TyphaSettings,
    signer_opts: SignerOptions,
    roles: tuple[RoleName, ...],
    ask_signer: bool,
) -> tuple[SignerOptions, Path | None, str, tuple[x509.Certificate, ...]]:
    """The emergency's step applied to one run's roles (docs/rotation.md): the signer
    options and CA directory of the CA that signs them (cfssl: the new intermediate's
    label `new_label`), which side that is, and the new CA when the bundle holds it
    beside the signer's. Refused (exit 2) for a shipped set, for roles two CAs sign at
    this step, and for a signer the step needs and hiera does not name."""
    from typhapki.errors import ConfigError, UsageError
    from typhapki.pki import emergency as roll
    from typhapki.pki.pem import parse_certs
    from typhapki.record import replace

    emergency = typha.emergency
    assert emergency is not None
    where = f"hiera {typha.sources.get('emergency', 'typha.emergency')}"
    if request.source is not None:
        raise UsageError(SHIPPED_EMERGENCY)
    sides = {roll.signer_side(emergency.step, role.value) for role in roles}
    if len(sides) > 1 and ask_signer:
        raise UsageError(
            f"{where}: step {emergency.step} signs Typha's leaf by the new CA and Felix's by "
            "the old: one run per role (typhapki issue and check do it themselves)"
        )
    # Nothing asked (lint-hiera): the new side's options are the ones to judge.
    side = roll.NEW if roll.NEW in sides else roll.OLD
    new_ca: tuple[x509.Certificate, ...] = ()
    if emergency.new_ca is not None:
        new_ca = tuple(parse_certs(emergency.new_ca.encode(), f"{where}.new_ca"))
    ca_dir = request.ca_dir
    if side == roll.NEW:
        if signer_opts.labelled:
            if emergency.new_label is None:
                raise ConfigError(
                    f"{where}: step {emergency.step} signs by the new CA: cfssl mode needs "
                    "new_label, the new intermediate's label"
                )
            sources = {**signer_opts.sources, "cfssl_label": f"{where}.new_label"}
            signer_opts = replace(signer_opts, cfssl_label=emergency.new_label, sources=sources)
        elif request.new_ca_dir is None:
            raise ConfigError(
                f"{where}: step {emergency.step} signs by the new CA: local CA mode needs "
                "the new CA's directory on the node (--new-ca-dir)"
            )
        else:
            ca_dir = request.new_ca_dir
    # The bundle holds both CAs from trust to felix-leaf: the signer's, and the other.
    both = roll.bundle_sides(emergency.step) == (roll.OLD, roll.NEW)
    return signer_opts, ca_dir, side, (new_ca if both or side == roll.NEW else ())


def resolve_loaded(
    request: Request, typha: TyphaSettings | None, require_signer: bool, ask_signer: bool = True
) -> Desired:
    """`resolve` over a cluster's ``typha:`` mapping already loaded (`request.hiera` is not
    read): `lint-hiera` judges each cluster of a hiera file by this very code."""
    from typhapki.pki.plan import Desired
    from typhapki.pki.verify import load_trusted

    for path in request.trust:
        existing("trust", path, "trusted CA certificate file")
    pki, settings, signer_opts = merge_cluster(request.pki, request.signer, typha)
    roles = tuple(parse_roles(request.role))
    _ = signer_opts.kind  # a misspelt --signer fails here, in check as in issue
    if request.source is not None:
        from typhapki.errors import UsageError
        from typhapki.pki.install import read_shipped

        if typha is not None and typha.emergency is not None:
            raise UsageError(SHIPPED_EMERGENCY)

        if request.ca_dir is not None or signer_opts.signer is not None:
            given = f": {signer_opts.said('signer')}" if signer_opts.signer is not None else ""
            raise UsageError(f"--from (a shipped set) excludes --ca-dir and --signer{given}")
        shipped = read_shipped(request.source, settings, roles)
        return Desired(request.out, roles, settings, shipped=shipped)
    state = state_root(request.state_dir)
    ca_dir, emergency = request.ca_dir, None
    # `check --out` alone names no signer: the set is judged by its own bundle.
    unsigned = not require_signer and request.ca_dir is None and signer_opts.local
    if typha is not None and typha.emergency is not None and not unsigned:
        signer_opts, ca_dir, side, new_ca = _emergency_signing(
            request, typha, signer_opts, roles, ask_signer
        )
        emergency = (side, new_ca)
    signer = checked_signer(signer_opts, ca_dir, settings, pki, roles, state, require_signer)
    if signer is None:
        return Desired(request.out, roles, settings)
    trusted = tuple(load_trusted(request.trust)) + hiera_trusted(typha)
    current = signer.current_ca() if ask_signer else None
    if current is not None:
        check_signer_renewal(settings, current, roles, signer.name)
    if emergency is None:
        return Desired(request.out, roles, settings, signer, current, trusted)
    from typhapki.pki.emergency import defers_typha_restart

    assert typha is not None and typha.emergency is not None
    trusted += _emergency_trusted(request, typha, emergency, current, state, ask_signer)
    deferred = frozenset({"bundle"} if defers_typha_restart(typha.emergency.step) else ())
    return Desired(request.out, roles, settings, signer, current, trusted, deferred=deferred)


def _emergency_trusted(
    request: Request,
    typha: TyphaSettings | None,
    emergency: tuple[str, tuple[x509.Certificate, ...]],
    current: CurrentCa | None,
    state: Path,
    ask_signer: bool,
) -> tuple[x509.Certificate, ...]:
    """The CAs the emergency's step adds to the bundle beside the signer's: the new CA
    while the old one signs (trust to felix-leaf), the old one while the new signs and
    the bundle still holds both (typha-leaf, felix-leaf), nothing at drop and after.
    The new signer's CA must be the new CA hiera names, or nothing is signed."""
    from typhapki.errors import ConfigError
    from typhapki.pki import emergency as roll
    from typhapki.pki.verify import fingerprint

    assert typha is not None and typha.emergency is not None
    side, new_ca = emergency
    where = f"hiera {typha.sources.get('emergency', 'typha.emergency')}"
    if side == roll.OLD:
        return new_ca
    if current is not None and new_ca and fingerprint(current.cert) != fingerprint(new_ca[0]):
        raise ConfigError(
            f"{where}.new_ca: the new signer's CA {current.cert.subject.rfc4514_string()} "
            f"(SHA-256 {fingerprint(current.cert)}) is not the new CA hiera names"
        )
    if roll.bundle_sides(typha.emergency.step) != (roll.OLD, roll.NEW) or not ask_signer:
        return ()
    # The old CA is the cluster's own signer's: asked as `check` asks it (its cache).
    from typhapki.record import replace

    old_request = replace(request, role="felix")
    _, settings, old_opts = merge_cluster(old_request.pki, old_request.signer, typha)
    roles = tuple(parse_roles("felix"))
    old = checked_signer(old_opts, request.ca_dir, settings, old_request.pki, roles, state, True)
    assert old is not None
    return (old.current_ca().cert,)


@record(frozen=True)
class Observed:
    """What monitoring judges a set by: `resolve`'s sources, merged the same way.

    `settings`: the settings, or why they could not be built (`built_settings` raises
    it, inside the caller's guard: monitoring then judges with the defaults). `errors`:
    what else failed (reading hiera, its signer or trust values). `signer`: the merged
    signer options when they name cfssl, whose CA monitoring reads from the cache `check`
    and `issue` keep (never asked); else None. `trusted`: hiera's ``typha.trust`` CAs,
    which join the bundle after the --trust files', as in `resolve`. `typha`: the
    cluster's mapping, when loaded. `state_dir`: the run's state directory
    (`state_root`), where the signer-CA cache and ferm.json are read.
    """

    settings: PkiSettings | Exception
    state_dir: Path
    signer: SignerOptions | None = None
    trusted: tuple[x509.Certificate, ...] = ()
    typha: TyphaSettings | None = None
    errors: tuple[Exception, ...] = ()

    def built_settings(self) -> PkiSettings:
        """The settings, or their error raised."""
        if isinstance(self.settings, Exception):
            raise self.settings
        return self.settings


def observe(
    pki: PkiOptions,
    signer: SignerOptions,
    hiera: Path | None,
    cluster: str | None,
    state_dir: Path | None = None,
    ca_dir: Path | None = None,
    roles: Sequence[RoleName] | None = None,
) -> Observed:
    """Flags over the cluster's hiera, as `resolve` merges them, for `facts`, `metrics` and
    `check --nagios`. Hiera is read once; the state directory is resolved as `resolve`
    resolves it; the signer is built and refused as `resolve` builds and refuses it
    (`checked_signer`), and asked nothing. Never raises: each part that fails is in
    `errors`, and the parts that did not fail are kept."""
    from typhapki.pki.settings import RoleName

    errors: list[Exception] = []
    typha = None
    try:
        typha = load_typha_settings(hiera, cluster)  # hiera read once
    except Exception as exc:
        errors.append(exc)
    settings: PkiSettings | Exception
    merged_pki = pki
    try:
        merged_pki, settings = merge_pki(pki, typha)
    except Exception as exc:
        settings = exc
    merged = signer
    trusted: tuple[x509.Certificate, ...] = ()
    if typha is not None:
        try:
            merged = merged_signer(signer, typha)
        except Exception as exc:
            errors.append(exc)
        try:
            trusted = hiera_trusted(typha)
        except Exception as exc:
            errors.append(exc)
    root = state_root(state_dir)
    if not errors and not isinstance(settings, Exception):
        try:  # what check would refuse before asking the signer anything
            wanted = tuple(roles) if roles is not None else (RoleName.TYPHA, RoleName.FELIX)
            checked_signer(merged, ca_dir, settings, merged_pki, wanted, root, False)
        except Exception as exc:
            errors.append(exc)
    cfssl = merged if merged.caches_ca else None
    return Observed(settings, root, cfssl, trusted, typha, tuple(errors))
