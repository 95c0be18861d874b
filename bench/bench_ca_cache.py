"""cfssl's `info` load from a fleet's `check` runs, with the signer CA cache.

Simulates N nodes (default 5,000) running `check` every 30 minutes (Puppet's
runinterval, each node at its own offset: the splay) for some hours, through the real
`CfsslSigner.current_ca` and its on-disk cache (typhapki/pki/signers/ca_cache.py), with
the clock and cfssl's `info` answer simulated. Prints the info requests per node per
TTL (the floor: at most one), the busiest minute, and what happens when cfssl is down
for an hour and comes back (the retry spread).

    .venv/bin/python bench/bench_ca_cache.py [--nodes 5000] [--hours 6]
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path
from unittest import mock

from cryptography import x509

from typhapki.errors import SignerError
from typhapki.pki.issuance import init_ca
from typhapki.pki.settings import KeyType, RoleName
from typhapki.pki.signers.cfssl import CfsslConfig, CfsslSigner

RUN_INTERVAL = 1800
URL = "https://pki.example.org:8888"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--hours", type=float, default=6.0)
    parser.add_argument("--ttl", type=int, default=3600)
    args = parser.parse_args()
    rng = random.Random(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ca: x509.Certificate = init_ca(root / "ca", KeyType.ECDSA_P256, 3650, None, False)
        nodes = [f"kube{i:05d}.eqiad.wmnet" for i in range(args.nodes)]
        offset = {n: rng.uniform(0, RUN_INTERVAL) for n in nodes}
        start = 1_800_000_000
        end = start + int(args.hours * 3600)
        outage = (start + 2 * 3600, start + 3 * 3600)  # cfssl down in the third hour
        asked: list[tuple[str, int]] = []
        clock = [float(start)]

        def fetch(self: CfsslSigner, profile: str) -> tuple[x509.Certificate, int | None]:
            if outage[0] <= clock[0] < outage[1]:
                raise SignerError(f"{URL}/api/v1/cfssl/info: cannot connect")
            asked.append((f"{self.config.node_name} {profile}", int(clock[0])))
            return ca, 24 * 3600  # the profile's expiry, as info reports it

        runs = sorted(
            (start + offset[n] + k * RUN_INTERVAL, n)
            for n in nodes
            for k in range(int((end - start) / RUN_INTERVAL) + 1)
            if start + offset[n] + k * RUN_INTERVAL < end
        )
        stale_runs = 0
        began = time.perf_counter()
        with (
            mock.patch.object(CfsslSigner, "_fetch_ca", fetch),
            mock.patch("time.time", lambda: clock[0]),
        ):
            for when, node in runs:
                clock[0] = when
                config = CfsslConfig(
                    url=URL,
                    node_name=node,
                    state_dir=root / "state" / node,
                    ca_ttl=timedelta(seconds=args.ttl),
                    roles=(RoleName.FELIX,),  # a worker; a Typha host asks per profile
                )
                current = CfsslSigner(config).current_ca()
                stale_runs += not current.confirmed
        spent = time.perf_counter() - began
    # Per node and profile, the most info requests inside one TTL (outside the outage).
    by_node: dict[str, list[int]] = {}
    for node, when in asked:
        by_node.setdefault(node, []).append(when)
    worst = 0
    for times in by_node.values():
        times.sort()
        j = 0
        for i, t in enumerate(times):
            while t - times[j] >= args.ttl:
                j += 1
            worst = max(worst, i - j + 1)
    per_minute = Counter(when // 60 for _, when in asked)
    after = Counter(when // 60 for _, when in asked if outage[1] <= when < outage[1] + 1800)
    after[0] += 0  # no request at all after the outage is a count of 0
    print(f"nodes {args.nodes}, {len(runs)} check runs over {args.hours:g} h, TTL {args.ttl} s")
    print(f"info requests: {len(asked)} ({len(asked) / len(runs):.1%} of runs)")
    print(f"most info requests by one node within one TTL: {worst} (floor: at most 1 a profile)")
    print(f"busiest minute: {max(per_minute.values())} requests")
    print(f"runs that judged by an unconfirmed CA during the 1-hour outage: {stale_runs}")
    print(f"busiest minute in the half hour after cfssl came back: {max(after.values())}")
    print(f"simulated in {spent:.1f} s ({spent / len(runs) * 1e6:.0f} us per run)")
    print("PASS" if worst <= 1 else "FAIL")


if __name__ == "__main__":
    main()
