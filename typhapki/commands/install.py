from __future__ import annotations

from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import UsageError
from typhapki.settings.pki import PkiOptions, parse_roles


def install(
    out: Path,
    role: str,
    source: Path | None,
    cert: Path | None,
    bundle: Path | None,
    opts: PkiOptions,
    as_json: bool,
    hiera: Path | None = None,
    cluster: str | None = None,
) -> int:
    """Install a shipped set (--from) or a certificate signed elsewhere (--cert)."""
    from typhapki.pki.install import install_certificate, install_shipped
    from typhapki.pki.restarts import report_changes
    from typhapki.settings.cluster import cluster_settings

    if (source is None) == (cert is None):
        raise UsageError("give either --from DIR (a shipped set) or --cert FILE (from request)")
    if bundle is not None and cert is None:
        raise UsageError("--bundle goes with --cert; a shipped set brings its own bundle")
    opts, settings = cluster_settings(opts, hiera, cluster)
    roles = parse_roles(role)
    if source is not None:
        changes, warnings = install_shipped(source, out, settings, roles)
    else:
        assert cert is not None
        if len(roles) != 1:
            raise UsageError("--cert installs one certificate: give --role typha or --role felix")
        changes, warnings = install_certificate(out, roles[0], cert, bundle, settings)
    for warning in warnings:
        print(f"typhapki: warning: {warning}")
    report_changes(out, [r.value for r in roles], changes, as_json)
    return 0


def run(request: CommandRequest) -> int:
    """`install`."""
    r = request
    return install(r.out, r.role, r.source, r.cert, r.bundle, r.pki, r.json_out, r.hiera, r.cluster)
