from __future__ import annotations

import sys
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.settings.cluster import single_role_settings
from typhapki.settings.pki import PkiOptions


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

    settings, name = single_role_settings(opts, hiera, cluster, role, "a CSR")
    key, replaced = request_key(out, name, settings)
    if replaced is not None:
        print(f"typhapki: warning: {replaced}", file=sys.stderr)
    pem = csr_pem(build_csr(key, settings.identity(name)))
    if csr_out is None:
        sys.stdout.write(pem.decode())
    else:
        write_file_atomic(csr_out, pem, 0o644)
        print(
            f"{csr_out}: CSR for {name.value} ({settings.identity(name).describe()}); "
            f"key staged in {staged_key_path(out, name)}"
        )
    return 0


def run(line: CommandRequest) -> int:
    """`request` (the command line's request is `line` here: `request` is the command)."""
    return request(line.out, line.role, line.csr_out, line.pki, line.hiera, line.cluster)
