from __future__ import annotations

import json
from pathlib import Path

from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, NeedsActionError
from typhapki.monitoring.request import settings_factory
from typhapki.settings.pki import PkiOptions


def probe(
    address: str,
    out: Path,
    pki: PkiOptions,
    hiera: Path | None,
    cluster: str | None,
    timeout: float,
    json_out: bool,
) -> int:
    """Exit 0 when Typha serves the certificate on disk, 1 when not or when refused."""
    from typhapki.monitoring.probe import parse_address
    from typhapki.monitoring.probe import probe as run_probe

    parse_address(address)
    settings = settings_factory(pki, hiera, cluster)()
    result = run_probe(address, out, settings.typha, timeout, settings.felix)
    if json_out:
        print(json.dumps(result.as_dict(), indent=2, sort_keys=True))
    served = result.served
    disk = result.disk
    if not result.accepted:
        # Loud: a real Felix on this node is refused the same way right now.
        served_text = (
            f" (it serves {served.fingerprint}, not after {served.not_after:%Y-%m-%dT%H:%M:%SZ})"
            if served is not None
            else ""
        )
        raise NeedsActionError(
            f"{address}: TLS handshake as this node's Felix failed: {result.error}{served_text}"
        )
    assert served is not None
    served_text = f"{served.fingerprint} (not after {served.not_after:%Y-%m-%dT%H:%M:%SZ})"
    if json_out:
        return EXIT_OK if result.serves_disk else EXIT_NEEDS_ACTION
    if result.serves_disk:
        print(f"{address}: Typha serves {served_text}: the certificate on disk")
        return EXIT_OK
    if disk is None:
        print(f"{address}: Typha serves {served_text}; no Typha certificate on disk to compare: "
              f"{result.disk_error}")  # fmt: skip
        return EXIT_NEEDS_ACTION
    print(
        f"{address}: DRIFT: Typha serves {served_text}, the disk holds {disk.fingerprint} "
        f"(not after {disk.not_after:%Y-%m-%dT%H:%M:%SZ}): restart Typha to load it"
    )
    return EXIT_NEEDS_ACTION
