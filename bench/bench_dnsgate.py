"""The DNS gate over 5,000 hosts (A + AAAA each: 10,000 queries).

    python bench/bench_dnsgate.py [--hosts N] [--sample N] [--delay-ms MS]

1. Against a local dnsmasq serving every name (target: under 3 s).
2. Against a server that answers each query after 20 ms, next to resolving the same
   names one after another (one query in flight at a time). The sequential run is
   timed on a sample of names and extrapolated to all of them, as printed (resolving
   5,000 names one by one at 20 ms per query takes minutes). Target: the gate at least
   20x faster than one after another.
"""

from __future__ import annotations

import argparse
import ipaddress
import math
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: make tests.support importable
    sys.path.insert(0, str(ROOT))

from tests.support.dns import Behaviour, ScriptedDns, start_dnsmasq  # noqa: E402
from typhapki.firewall.dnsgate import resolve_all  # noqa: E402

LOCAL_TARGET_S = 3.0
SPEEDUP_TARGET = 20.0


def records(count: int) -> dict[str, list[str]]:
    """count names, each with one A (10.128.0.0/9) and one AAAA (fd00:5473::/64)."""
    return {
        f"node{i:05d}.bench.test": [
            str(ipaddress.IPv4Address((10 << 24) | (128 << 16) | i)),
            str(ipaddress.IPv6Address((0xFD00_5473 << 96) | i)),
        ]
        for i in range(count)
    }


def bench_local(count: int) -> float:
    if shutil.which("dnsmasq") is None:
        print("local dnsmasq: SKIPPED (dnsmasq not installed)")
        return float("nan")
    zone = records(count)
    with tempfile.TemporaryDirectory(prefix="bench-dnsgate-") as tmp:
        server = start_dnsmasq(Path(tmp), zone)
        try:
            resolve_all(list(zone)[:50], nameservers=[server.nameserver])  # warm-up
            start = time.perf_counter()
            result = resolve_all(zone, nameservers=[server.nameserver], require_ipv6=True)
            elapsed = time.perf_counter() - start
        finally:
            server.stop()
    assert result.ok, result.failure_lines()[:5]
    assert len(result.all_addresses()) == 2 * count
    verdict = "OK" if elapsed < LOCAL_TARGET_S else "MISSED"
    print(
        f"local dnsmasq: {count} hosts ({2 * count} queries) resolved in {elapsed:.2f} s "
        f"({2 * count / elapsed:,.0f} queries/s); target < {LOCAL_TARGET_S:.0f} s: {verdict}"
    )
    return elapsed


def bench_delayed(count: int, sample: int, delay_ms: float) -> float:
    names = [f"node{i:05d}.slow.test" for i in range(count)]
    with ScriptedDns(default=Behaviour.SYNTHESIZE, delay=delay_ms / 1000) as server:
        start = time.perf_counter()
        result = resolve_all(names, nameservers=[server.nameserver], require_ipv6=True)
        gate = time.perf_counter() - start
        assert result.ok, result.failure_lines()[:5]
        # One after another: one query in flight at a time, same code path.
        picked = names[:sample]
        start = time.perf_counter()
        sequential = resolve_all(picked, nameservers=[server.nameserver], concurrency=1)
        sample_s = time.perf_counter() - start
        assert sequential.ok
        max_in_flight = server.max_pending
    extrapolated = sample_s * count / sample
    speedup = extrapolated / gate
    verdict = "OK" if speedup >= SPEEDUP_TARGET else "MISSED"
    print(
        f"{delay_ms:.0f} ms server, gate: {count} hosts ({2 * count} queries) in {gate:.2f} s "
        f"(at most {max_in_flight} queries in flight)"
    )
    print(
        f"{delay_ms:.0f} ms server, one after another: {sample} hosts in {sample_s:.2f} s, "
        f"extrapolated to {count} hosts: {extrapolated:.1f} s"
    )
    print(
        f"{delay_ms:.0f} ms server: gate {speedup:.0f}x faster than one after another; "
        f"target >= {SPEEDUP_TARGET:.0f}x: {verdict}"
    )
    return speedup


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=5000)
    parser.add_argument("--sample", type=int, default=250)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    args = parser.parse_args()
    local = bench_local(args.hosts)
    speedup = bench_delayed(args.hosts, args.sample, args.delay_ms)
    ok = (math.isnan(local) or local < LOCAL_TARGET_S) and speedup >= SPEEDUP_TARGET
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
