"""What parsing every certificate completely costs (issue 8, class 1), in process.

    python bench/bench_hostile.py [--runs N]

Prints, per certificate of an issued set, the median time to load a PEM certificate
lazily (what typhapki did before) and to load it and read every field typhapki relies
on (`pem.parse_certs` now), and the median of a whole `check_set` on a full set.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from typhapki.pki.issuance import ensure_set, init_ca, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import parse_certs
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.signers.local import LocalSigner
from typhapki.pki.verify import check_set
from typhapki.pki.x509compat import load_pem_certificates


def median_us(fn: object, runs: int) -> float:
    assert callable(fn)
    samples = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1e6)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        init_ca(root / "ca", KeyType.ECDSA_P256, 3650, None, force=False)
        both = [RoleName.TYPHA, RoleName.FELIX]
        ensure_set(root / "out", LocalSigner(load_issuer(root / "ca")), PkiSettings(), both)
        pem = SetPaths(root / "out").cert(RoleName.TYPHA).read_bytes()
        lazy = median_us(lambda: load_pem_certificates(pem), args.runs)
        eager = median_us(lambda: parse_certs(pem, "typha.crt"), args.runs)
        now = datetime.now(UTC)
        paths = SetPaths(root / "out")
        check = median_us(
            lambda: check_set(paths, PkiSettings(), both, now), max(args.runs // 10, 20)
        )
    print(f"load one leaf, lazily (before):          {lazy:8.1f} us median")
    print(f"load one leaf, every field read (now):   {eager:8.1f} us median")
    print(f"difference per certificate:              {eager - lazy:8.1f} us")
    print(f"check_set on a full set (3 certs, 2 keys): {check / 1000:6.2f} ms median")


if __name__ == "__main__":
    main()
