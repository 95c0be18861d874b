from __future__ import annotations

from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.pki.settings import KeyType, validate_cn, validate_days


def ca_init(ca_dir: Path, key_type: str, days: int, cn: str | None, force: bool) -> int:
    from datetime import UTC, datetime

    from typhapki.pki.certinfo import describe
    from typhapki.pki.issuance import init_ca

    if cn is not None:
        validate_cn(cn, "CA CN")
    cert = init_ca(ca_dir, KeyType.parse(key_type), validate_days(days, "CA days"), cn, force)
    info = describe(cert, datetime.now(UTC))
    print(
        f"created CA {info['subject']} in {ca_dir} "
        f"(sha256 {info['sha256_fingerprint']}, valid until {info['not_after']})"
    )
    return 0


def run(request: CommandRequest) -> int:
    """`ca init`."""
    r = request
    return ca_init(r.ca_dir, r.key_type, r.days, r.cn, r.force)
