"""The status request `metrics`, `probe` and `check --nagios` share: the set judged like `check`.

`metrics` and `check --nagios` resolve their options with typhapki/settings/desired.py
`observe`, the resolution `check` makes; `probe` needs only the settings."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.pki.settings import PkiSettings
from typhapki.settings.pki import PkiOptions, parse_roles

if TYPE_CHECKING:
    from cryptography import x509

    from typhapki.monitoring.status import StatusRequest
    from typhapki.settings.desired import Observed
    from typhapki.settings.signer import SignerOptions


def settings_factory(
    opts: PkiOptions, hiera: Path | None, cluster: str | None
) -> Callable[[], PkiSettings]:
    """Flags over the cluster's hiera settings, built when called (inside a guard)."""

    def build() -> PkiSettings:
        from typhapki.settings.cluster import cluster_settings

        return cluster_settings(opts, hiera, cluster)[1]

    return build


def observed_request(
    out: Path,
    role: str,
    pki: PkiOptions,
    signer: SignerOptions | None,
    ca_dir: Path | None,
    trust: Sequence[Path],
    hiera: Path | None,
    cluster: str | None,
    probe_address: str | None,
    no_probe: bool,
    *,
    ferm_state: bool = True,
    state_dir: Path | None = None,
    typha_uid: int | None = None,
) -> tuple[Observed, StatusRequest]:
    """The one resolution `check` makes (typhapki/settings/desired.py `observe`: hiera
    read once, typha.trust included), and the request that gathers the set's status by
    it, for `metrics` and `check --nagios`."""
    from typhapki.errors import UsageError
    from typhapki.settings.desired import observe
    from typhapki.settings.signer import SignerOptions

    try:
        roles = parse_roles(role)
    except UsageError:
        roles = None  # status_request below refuses it (exit 2)
    observed = observe(pki, signer or SignerOptions(), hiera, cluster, state_dir, ca_dir, roles)
    request = status_request(
        out,
        role,
        ca_dir,
        trust,
        cluster,
        probe_address,
        no_probe,
        ferm_state=ferm_state,
        state_dir=observed.state_dir,
        signer=observed.signer,
        trusted=observed.trusted,
        typha_uid=typha_uid,
    )
    return observed, request


def status_request(
    out: Path,
    role: str,
    ca_dir: Path | None,
    trust: Sequence[Path],
    cluster: str | None,
    probe_address: str | None,
    no_probe: bool,
    *,
    ferm_state: bool = True,
    state_dir: Path | None = None,
    signer: SignerOptions | None = None,
    trusted: Sequence[x509.Certificate] = (),
    typha_uid: int | None = None,
) -> StatusRequest:
    """What `metrics` and `check --nagios` gather; a bad --role, --probe-address or
    --typha-uid is a usage error (UsageError), not a failed probe."""
    from typhapki.monitoring.status import StatusRequest
    from typhapki.options import DEFAULT_TYPHA_UID

    if probe_address is not None:
        from typhapki.monitoring.probe import parse_address  # ssl only when probing
        from typhapki.provenance import parsed

        parsed("probe_address", probe_address,
               lambda what: parse_address(probe_address, what))  # fmt: skip
    return StatusRequest(
        out,
        roles=parse_roles(role),
        ca_dir=ca_dir,
        trust=list(trust),
        cluster=cluster,
        probe_address=probe_address,
        probe=not no_probe,
        ferm_state=ferm_state,
        state_dir=state_dir,
        signer=signer,
        trusted=trusted,
        typha_uid=parse_typha_uid(typha_uid) if typha_uid is not None else DEFAULT_TYPHA_UID,
    )


def parse_typha_uid(value: object) -> int:
    """--typha-uid (a flag's int, the node configuration's or the fact's text): the
    uid a running Typha may have besides root (typhapki/monitoring/processes.py)."""
    from typhapki.errors import UsageError
    from typhapki.monitoring.processes import MAX_UID
    from typhapki.numbers import whole_number
    from typhapki.provenance import parsed

    return parsed(
        "typha_uid",
        value,
        lambda what: whole_number(value, low=1, high=MAX_UID, what=what, error=UsageError),
    )
