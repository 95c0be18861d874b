from __future__ import annotations

import sys
from pathlib import Path

from typhapki.commands.pki_options import PkiOptions, build_settings, parse_roles
from typhapki.errors import UsageError
from typhapki.pki.x509compat import valid_until


def sign(
    ca_dir: Path,
    csr_file: Path,
    role: str,
    cert_out: Path | None,
    opts: PkiOptions,
    hiera: Path | None = None,
    cluster: str | None = None,
) -> int:
    """Sign a node's CSR with the CA: identity, EKU and lifetime from the settings."""
    from typhapki.pki.issuance import load_issuer
    from typhapki.pki.profiles import cert_pem
    from typhapki.pki.signers.csr import parse_csr
    from typhapki.pki.signers.local import LocalSigner
    from typhapki.pki.store import write_file_atomic
    from typhapki.puppet.cluster_options import with_cluster_options
    from typhapki.safeio import read_regular

    opts = with_cluster_options(opts, hiera, cluster)
    settings = build_settings(opts)
    roles = parse_roles(role)
    if len(roles) != 1:
        raise UsageError("--role: a certificate is for one role, typha or felix")
    issuer = load_issuer(ca_dir)
    csr = parse_csr(read_regular(csr_file, "CSR"), str(csr_file), settings.key_type)
    leaf = LocalSigner(issuer, settings).sign(csr, roles[0])[0]
    pem = cert_pem(leaf)
    if cert_out is None:
        sys.stdout.write(pem.decode())
    else:
        write_file_atomic(cert_out, pem, 0o644)
        print(
            f"{cert_out}: {roles[0].value} certificate serial {leaf.serial_number:x} "
            f"({settings.identity(roles[0]).describe()}), valid until "
            f"{valid_until(leaf):%Y-%m-%dT%H:%M:%SZ}"
        )
    return 0
