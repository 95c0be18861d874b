from __future__ import annotations

import sys
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.pki.x509compat import valid_until
from typhapki.settings.cluster import single_role_settings
from typhapki.settings.pki import PkiOptions, check_local_renewal


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
    from typhapki.safeio import read_regular

    settings, name = single_role_settings(opts, hiera, cluster, role, "a certificate")
    check_local_renewal(settings, [name])
    issuer = load_issuer(ca_dir)
    csr = parse_csr(read_regular(csr_file, "CSR"), str(csr_file), settings.key_type)
    leaf = LocalSigner(issuer, settings).sign(csr, name)[0]
    pem = cert_pem(leaf)
    if cert_out is None:
        sys.stdout.write(pem.decode())
    else:
        write_file_atomic(cert_out, pem, 0o644)
        print(
            f"{cert_out}: {name.value} certificate serial {leaf.serial_number:x} "
            f"({settings.identity(name).describe()}), valid until "
            f"{valid_until(leaf):%Y-%m-%dT%H:%M:%SZ}"
        )
    return 0


def run(request: CommandRequest) -> int:
    """`sign`."""
    r = request
    return sign(r.ca_dir, r.csr, r.role, r.cert_out, r.pki, r.hiera, r.cluster)
