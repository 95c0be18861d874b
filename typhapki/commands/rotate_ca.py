from __future__ import annotations

import json
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK
from typhapki.settings.pki import PkiOptions, check_local_renewal, parse_roles


def rotate_ca(
    stage: str,
    ca_dir: Path,
    new_ca_dir: Path,
    out: Path,
    role: str,
    opts: PkiOptions,
    check: bool,
    allow_rollback: bool,
    as_json: bool,
    hiera: Path | None = None,
    cluster: str | None = None,
) -> int:
    """Bring OUT to a CA rotation stage; with --check only say whether it is there."""
    from typhapki.pki.rotation import Stage, check_stage, rotate
    from typhapki.settings.cluster import cluster_settings

    target = Stage.parse(stage)
    opts, settings = cluster_settings(opts, hiera, cluster)  # the same sources as `issue`
    roles = parse_roles(role)
    check_local_renewal(settings, roles, opts)  # local CAs sign for the settings' lifetimes
    if check:
        lines = check_stage(out, ca_dir, new_ca_dir, target, settings, roles)
        if as_json:
            print(json.dumps({"stage": target.label, "ok": not lines, "problems": lines}))
        elif lines:
            print("\n".join(lines))
        else:
            print(f"{out}: at stage {target.label} ({int(target)})")
        return EXIT_NEEDS_ACTION if lines else EXIT_OK
    result = rotate(out, ca_dir, new_ca_dir, target, settings, roles, allow_rollback)
    if as_json:
        print(
            json.dumps(
                {
                    "stage_before": int(result.before),
                    "stage_after": int(result.after),
                    "changed": bool(result.changes),
                    "changes": [c.as_dict() for c in result.changes],
                },
                indent=2,
            )
        )
        return EXIT_OK
    for change in result.changes:
        print(change.line())
    verb = "already at" if not result.changes else "now at"
    print(f"{out}: {verb} stage {result.after.label} ({int(result.after)})")
    return EXIT_OK


def run(request: CommandRequest) -> int:
    """`rotate-ca`."""
    r = request
    return rotate_ca(
        r.stage, r.ca_dir, r.new_ca_dir, r.out, r.role, r.pki, r.check, r.allow_rollback,
        r.json_out, r.hiera, r.cluster,
    )  # fmt: skip
