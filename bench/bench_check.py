"""Median wall time of `typhapki check` on a full set, as a fresh process, next to the
equivalent openssl pipeline (expiry and renewal window, chain, purpose, CN, key match,
for both certificates).

    python bench/bench_check.py [--runs N]

Targets (issue 2): check faster than the pipeline, and under 150 ms median.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_MS = 150.0

OPENSSL_PIPELINE = r"""
set -e
out=$1
ca=$out/calico-typha-ca/typhaca.crt
one() {  # cert key purpose cn
  openssl x509 -in "$1" -noout -checkend 10512000 >/dev/null      # not inside the last third
  openssl verify -CAfile "$ca" -purpose "$3" "$1" >/dev/null        # chain + EKU
  [ "$(openssl x509 -in "$1" -noout -subject -nameopt RFC2253)" = "subject=CN=$4" ]
  [ "$(openssl x509 -in "$1" -noout -pubkey | openssl sha256)" = \
    "$(openssl pkey -in "$2" -pubout | openssl sha256)" ]          # key matches
}
t=$out/calico-typha-certs n=$out/calico-node-certs
one "$t/typha.crt" "$t/typha.key" sslserver calico-typha
one "$n/calico-node.crt" "$n/calico-node.key" sslclient calico-node
"""


def typhapki() -> list[str]:
    exe = Path(sys.executable).parent / "typhapki"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "typhapki"]


def median_ms(cmd: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        times.append((time.perf_counter() - t0) * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"benchmark command failed: {' '.join(cmd)}: {proc.stderr!r}")
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    if shutil.which("openssl") is None:
        raise SystemExit("openssl is not installed (bash scripts/setup.sh)")
    with tempfile.TemporaryDirectory() as tmp:
        ca, out = Path(tmp) / "ca", Path(tmp) / "out"
        subprocess.run([*typhapki(), "ca", "init", "--ca-dir", str(ca)], check=True,
                       stdout=subprocess.DEVNULL)  # fmt: skip
        subprocess.run([*typhapki(), "issue", "--ca-dir", str(ca), "--out", str(out)],
                       check=True, stdout=subprocess.DEVNULL)  # fmt: skip
        # Warm the page cache and .pyc files once; then measure.
        median_ms([*typhapki(), "check", "--out", str(out), "-q"], 2)
        check = median_ms([*typhapki(), "check", "--out", str(out), "-q"], args.runs)
        pipeline = median_ms(["bash", "-c", OPENSSL_PIPELINE, "pipeline", str(out)], args.runs)
    print(f"typhapki check (fresh process), median of {args.runs}: {check:7.1f} ms")
    print(f"openssl pipeline (14 processes), median of {args.runs}: {pipeline:7.1f} ms")
    print(f"speed-up: {pipeline / check:.2f}x")
    ok = check < pipeline and check < TARGET_MS
    print(f"target: check < pipeline and < {TARGET_MS:.0f} ms: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
