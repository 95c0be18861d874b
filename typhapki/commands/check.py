from __future__ import annotations

from pathlib import Path

from typhapki.commands.pki_options import PkiOptions, build_settings, parse_roles
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK


def check(
    out: Path,
    role: str,
    opts: PkiOptions,
    ca_dir: Path | None,
    trust: list[Path],
    quiet: bool,
    hiera: Path | None = None,
    cluster: str | None = None,
) -> int:
    """Exit 0 when every managed file is present and valid, 1 with a line per problem."""
    from datetime import UTC, datetime

    from typhapki.pki.layout import SetPaths
    from typhapki.pki.verify import check_set
    from typhapki.puppet.cluster_options import with_cluster_options

    opts = with_cluster_options(opts, hiera, cluster)  # flags win over hiera
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
        return EXIT_OK
    for problem in report.problems:
        print(problem.line())
    return EXIT_NEEDS_ACTION
