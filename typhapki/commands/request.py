from __future__ import annotations

import sys
from pathlib import Path

from typhapki.commands.pki_options import PkiOptions, build_settings, parse_roles
from typhapki.errors import UsageError


def request(
    out: Path,
    role: str,
    csr_out: Path | None,
    opts: PkiOptions,
    hiera: Path | None = None,
    cluster: str | None = None,
) -> int:
    """Make or keep the node's staged key for ROLE and print (or write) its CSR."""
    from typhapki.pki.install import request_key, staged_key_path
    from typhapki.pki.signers.csr import build_csr, csr_pem
    from typhapki.pki.store import write_file_atomic
    from typhapki.puppet.cluster_options import with_cluster_options

    opts = with_cluster_options(opts, hiera, cluster)
    settings = build_settings(opts)
    roles = parse_roles(role)
    if len(roles) != 1:
        raise UsageError("--role: a CSR is for one role, typha or felix")
    key = request_key(out, roles[0], settings)
    pem = csr_pem(build_csr(key, settings.identity(roles[0])))
    if csr_out is None:
        sys.stdout.write(pem.decode())
    else:
        write_file_atomic(csr_out, pem, 0o644)
        print(
            f"{csr_out}: CSR for {roles[0].value} ({settings.identity(roles[0]).describe()}); "
            f"key staged in {staged_key_path(out, roles[0])}"
        )
    return 0
