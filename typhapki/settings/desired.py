"""Flags, the node configuration file, hiera and defaults resolved into one desired state.

The node configuration file reaches the commands as click's defaults (typhapki/cli.py),
so by the time a command runs its options hold flags over the file; this module puts
the cluster's hiera under them (loaded once), validates the result into settings, builds
the signer and asks it for its current CA. `check`, `issue` and `install` all call
`resolve`, so they judge the set by the same desired state (typhapki/pki/plan.py).
"""

from __future__ import annotations

from pathlib import Path

from typhapki.pki.settings import check_renewal
from typhapki.record import record
from typhapki.settings.cluster import load_typha_settings, merge_cluster
from typhapki.settings.pki import PkiOptions, build_settings, check_local_renewal, parse_roles
from typhapki.settings.signer import SignerOptions

TYPE_CHECKING = False  # typing is not imported at run time (typhapki/record.py)
if TYPE_CHECKING:
    from cryptography import x509

    from typhapki.pki.plan import Desired
    from typhapki.puppet.hiera import TyphaSettings


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


def hiera_trusted(typha: TyphaSettings | None) -> tuple[x509.Certificate, ...]:
    """The cluster's ``typha.trust`` CAs (checked when hiera was read), after --trust's."""
    if typha is None or not typha.trust:
        return ()
    from typhapki.pki.pem import parse_certs

    return tuple(c for pem in typha.trust for c in parse_certs(pem.encode(), "typha.trust"))


def wants_signer(request: Request, signer: SignerOptions) -> bool:
    """Whether the options name a signer at all (`check --out` alone names none)."""
    return request.ca_dir is not None or signer.kind != "local"


def resolve(request: Request, require_signer: bool, ask_signer: bool = True) -> Desired:
    """The desired state of the set under `request.out`.

    `require_signer`: `issue` cannot work without one (exit 2); `check` without one judges
    the set by its own bundle. `ask_signer` False builds the signer without asking for its
    CA (nothing in the desired state depends on the signer then).
    """
    from typhapki.pki.issuance import load_trusted
    from typhapki.pki.plan import Desired
    from typhapki.pki.signers.factory import build_signer

    typha = load_typha_settings(request.hiera, request.cluster)  # hiera read once
    pki, signer_opts = merge_cluster(
        request.pki, request.signer, typha, request.hiera, request.cluster
    )
    settings = build_settings(pki)
    roles = tuple(parse_roles(request.role))
    _ = signer_opts.kind  # a misspelt --signer fails here, in check as in issue
    if request.source is not None:
        from typhapki.errors import UsageError
        from typhapki.pki.install import read_shipped

        if request.ca_dir is not None or signer_opts.signer is not None:
            given = f": {signer_opts.said('signer')}" if signer_opts.signer is not None else ""
            raise UsageError(f"--from (a shipped set) excludes --ca-dir and --signer{given}")
        shipped = read_shipped(request.source, settings, roles)
        return Desired(request.out, roles, settings, shipped=shipped)
    if not require_signer and not wants_signer(request, signer_opts):
        signer_opts.refuse_cfssl_options()  # as build_signer would, in check as in issue
        return Desired(request.out, roles, settings)
    trusted = tuple(load_trusted(request.trust)) + hiera_trusted(typha)
    # A renewal window as long as the lifetime would renew on every run: the local CA
    # signs for the settings' lifetimes, a remote signer for its profile's.
    if request.ca_dir is not None:
        check_local_renewal(settings, roles, pki)
    signer = build_signer(signer_opts, request.ca_dir, settings, roles=roles)
    current = signer.current_ca() if ask_signer else None
    if current is not None and not current.anchors:
        for role, lifetime in current.lifetimes.items():
            if role in roles:
                check_renewal(settings, lifetime, f"the {role.value} lifetime ({signer.name})")
    return Desired(request.out, roles, settings, signer, current, trusted)
