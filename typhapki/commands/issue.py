from __future__ import annotations

import json
from pathlib import Path

from typhapki.commands.pki_options import PkiOptions, build_settings, parse_roles


def issue(
    ca_dir: Path,
    out: Path,
    role: str,
    opts: PkiOptions,
    trust: list[Path],
    as_json: bool,
    hiera: Path | None = None,
    cluster: str | None = None,
) -> int:
    from typhapki.pki.issuance import ensure_set, load_issuer, load_trusted
    from typhapki.pki.restarts import components_to_restart
    from typhapki.puppet.cluster_options import with_cluster_options

    opts = with_cluster_options(opts, hiera, cluster)  # flags win over hiera
    settings = build_settings(opts)
    roles = parse_roles(role)
    issuer = load_issuer(ca_dir)
    trusted = load_trusted(trust)
    changes = ensure_set(out, issuer, settings, roles, trusted)
    if as_json:
        print(
            json.dumps(
                {
                    "changed": bool(changes),
                    "changes": [c.as_dict() for c in changes],
                    "restart": [
                        c.value
                        for c in components_to_restart(ch.scope for ch in changes if ch.restarts)
                    ],
                },
                indent=2,
            )
        )
    elif not changes:
        print(f"{out}: {', '.join(r.value for r in roles)} set valid and fresh; nothing changed")
    else:
        for change in changes:
            print(change.line())
    return 0
