from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.commands.pki_options import PkiOptions, build_settings, parse_roles
from typhapki.commands.signer_options import SignerOptions, build_signer

if TYPE_CHECKING:
    from typhapki.pki.issuance import Change


def report_changes(out: Path, roles: list[str], changes: list[Change], as_json: bool) -> None:
    """What `issue` and `install` print: the changes and whom to restart, or nothing to do."""
    from typhapki.commands.restarts import record_restarts

    restart = record_restarts(out, changes)
    if as_json:
        print(
            json.dumps(
                {
                    "changed": bool(changes),
                    "changes": [c.as_dict() for c in changes],
                    "restart": restart,
                },
                indent=2,
            )
        )
    elif not changes:
        print(f"{out}: {', '.join(roles)} set valid and fresh; nothing changed")
    else:
        for change in changes:
            print(change.line())


def issue(
    ca_dir: Path | None,
    out: Path,
    role: str,
    opts: PkiOptions,
    trust: list[Path],
    as_json: bool,
    hiera: Path | None = None,
    cluster: str | None = None,
    signer_opts: SignerOptions | None = None,
) -> int:
    from typhapki.pki.issuance import ensure_set, load_trusted
    from typhapki.puppet.cluster_options import with_cluster_options, with_cluster_signer

    opts = with_cluster_options(opts, hiera, cluster)  # flags win over hiera
    signer_opts = with_cluster_signer(signer_opts or SignerOptions(), hiera, cluster)
    settings = build_settings(opts)
    roles = parse_roles(role)
    trusted = load_trusted(trust)
    signer = build_signer(signer_opts, ca_dir)
    changes = ensure_set(out, signer, settings, roles, trusted)
    report_changes(out, [r.value for r in roles], changes, as_json)
    return 0
