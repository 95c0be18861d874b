from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.commands.pki_options import PkiOptions, build_settings, parse_roles
from typhapki.commands.signer_options import SignerOptions
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK

if TYPE_CHECKING:
    from typhapki.pki.settings import PkiSettings
    from typhapki.pki.verify import SetReport


def renewal_line(report: SetReport, settings: PkiSettings) -> str:
    """This node's own renewal moments (spread by --node-name inside the window)."""
    from typhapki.pki.verify import renewal_due_at

    moments = [
        f"{role.value} at {renewal_due_at(state.leaf, settings):%Y-%m-%dT%H:%M:%SZ}"
        for role, state in report.roles.items()
        if state.leaf is not None
    ]
    return f"node {settings.node_name} renews {', '.join(moments)}"


def check(
    out: Path,
    role: str,
    opts: PkiOptions,
    ca_dir: Path | None,
    trust: list[Path],
    quiet: bool,
    hiera: Path | None = None,
    cluster: str | None = None,
    signer_opts: SignerOptions | None = None,
) -> int:
    """Exit 0 when every managed file is present and valid, 1 with a line per problem.

    The signer options are accepted (Puppet's `unless` repeats `issue`'s) but no signer
    is asked anything: with cfssl, leaves are judged against the bundle on disk.
    """
    from datetime import UTC, datetime

    from typhapki.pki.layout import SetPaths
    from typhapki.pki.verify import check_set
    from typhapki.puppet.cluster_options import with_cluster_options

    opts = with_cluster_options(opts, hiera, cluster)  # flags win over hiera
    if signer_opts is not None:
        _ = signer_opts.kind  # a misspelt --signer fails here as it would in `issue`
    settings = build_settings(opts)
    roles = parse_roles(role)
    signing = None
    bundle = None
    if ca_dir is not None:
        from typhapki.pki.issuance import load_wanted_bundle  # only with --ca-dir: start-up cost

        signing, bundle = load_wanted_bundle(ca_dir, trust)
    report = check_set(SetPaths(out), settings, roles, datetime.now(UTC), bundle, signing)
    if report.bundle is not None and len(report.bundle) > 1 and not quiet:
        # Several CAs in the bundle: say which rotation stage the node is in.
        from typhapki.pki.rotation import describe_rotation

        rotation = describe_rotation(report)
        stage = rotation["stage_name"] or "unknown (see docs/rotation.md)"
        print(f"{out}: CA rotation: {rotation['bundle_cas']} CAs trusted, stage {stage}")
    if report.ok:
        if not quiet:
            print(f"{out}: {', '.join(r.value for r in roles)} set valid")
            print(f"{out}: {renewal_line(report, settings)}")
        return EXIT_OK
    for problem in report.problems:
        print(problem.line())
    return EXIT_NEEDS_ACTION
