"""What issuing through cfssl costs, and how far the renewal spread thins the herd.

    python bench/bench_issuance.py [--runs N] [--nodes N]

Prints the median wall time (fresh processes, as Puppet runs them) of `issue` for a
full Typha + Felix set with the local CA and with Debian's cfssl on loopback (two
authsign requests and one info request), of `issue` when nothing is due (cfssl: the
info request only), and of `check`. Then, for a fleet issued in one Puppet run: the
most nodes renewing in any one 30-minute Puppet interval, with and without the spread.
"""

from __future__ import annotations

import argparse
import collections
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.support.cfssl import start_cfssl, write_auth_key
from typhapki.pki.settings import PkiSettings

PUPPET_INTERVAL = timedelta(minutes=30)


def typhapki() -> list[str]:
    exe = Path(sys.executable).parent / "typhapki"
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "typhapki"]


def run_ms(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True)
    elapsed = (time.perf_counter() - t0) * 1000
    if proc.returncode != 0:
        raise SystemExit(f"benchmark command failed: {' '.join(cmd)}: {proc.stderr!r}")
    return elapsed


def herd(nodes: int, spread: bool) -> int:
    """Most renewals in one Puppet interval for `nodes` leaves issued at the same second."""
    nb = datetime(2026, 1, 1, tzinfo=UTC)
    na = nb + timedelta(days=365)
    slots: collections.Counter[int] = collections.Counter()
    for n in range(nodes):
        name = f"kube{n:05d}.eqiad.wmnet" if spread else None
        moment = PkiSettings(node_name=name).renewal_moment(nb, na)
        slots[int((moment - nb) / PUPPET_INTERVAL)] += 1
    return max(slots.values())


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--nodes", type=int, default=5000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        server = start_cfssl(tmp / "cfssl")
        try:
            key = write_auth_key(tmp / "auth.key")
            cfssl = ["--signer", "cfssl", "--cfssl-url", server.url, "--cfssl-auth-key", str(key)]
            local = ["--ca-dir", str(server.ca_dir)]
            rows = []
            for name, signer in (("local CA", local), ("cfssl", cfssl)):
                fresh, again = [], []
                for i in range(args.runs):
                    out = tmp / f"{name.replace(' ', '-')}-{i}"
                    cmd = [*typhapki(), "issue", "--out", str(out), *signer]
                    fresh.append(run_ms(cmd))
                    again.append(run_ms(cmd))
                rows.append((f"issue, {name}, new set (both roles)", fresh))
                rows.append((f"issue, {name}, nothing due", again))
            check = [*typhapki(), "check", "--out", str(tmp / "cfssl-0"), "--quiet"]
            rows.append(("check (any mode)", [run_ms(check) for _ in range(args.runs)]))
        finally:
            server.stop()
    print(f"median wall time over {args.runs} runs, fresh processes:")
    for label, times in rows:
        print(f"  {label:42s} {statistics.median(times):7.1f} ms")
    print(f"renewals in the busiest 30-minute Puppet interval, {args.nodes} nodes issued at once:")
    print(f"  without the spread: {herd(args.nodes, spread=False)}")
    print(f"  with the spread:    {herd(args.nodes, spread=True)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
