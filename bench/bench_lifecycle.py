"""A fleet's certificate life cycle: signing load on cfssl and Typha restarts, simulated.

5,000 nodes (default) in clusters of 500, each cluster with 50 Typha hosts (role both:
a Typha and a Felix pair; the other nodes hold Felix only). Felix certificates live
24 hours, Typha's 28 days; the cluster's pki_renew_seconds is the fleet's 952200 (11
days plus a run). Puppet runs every 30 minutes on each node at its own offset (the
splay). A node renews a certificate in the first run at or after its renewal moment,
computed by the real `PkiSettings.renewal_moment` (typhapki/pki/settings.py), with the
node's spread (its name) or without it (the window's start for every node). A renewed
Typha certificate means that host's Typha restarts (Typha loads its certificate once).

Two starts: the whole fleet issued in one Puppet run (a bootstrap, or stage 2 of a CA
rotation, docs/rotation.md), and a fleet already in its steady state (each node issued
at a random moment of its lifetime). Prints, per start and with or without the spread:
the busiest 30-minute interval's signing requests to cfssl and the mean, and the most
Typha restarts in one hour in one cluster (and in one 30-minute run).

    .venv/bin/python bench/bench_lifecycle.py [--nodes 5000] [--days 30]

Pure simulation: no certificate is made, the clock is arithmetic; it runs in seconds.
"""

from __future__ import annotations

import argparse
import heapq
import math
import random
import time
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from typhapki.pki.settings import PkiSettings, RoleName, describe_duration
from typhapki.record import replace

RUN_INTERVAL = 1800  # Puppet's runinterval, seconds
START = datetime(2026, 1, 5, tzinfo=UTC)


@dataclass(frozen=True)
class Fleet:
    nodes: int = 5000
    cluster_size: int = 500
    typha_hosts: int = 50  # per cluster: the hosts that hold a Typha pair
    felix_lifetime: timedelta = timedelta(hours=24)
    typha_lifetime: timedelta = timedelta(days=28)
    cluster_renew: timedelta | None = timedelta(seconds=952200)
    days: float = 30.0
    seed: int = 1


@dataclass(frozen=True)
class Figures:
    """What one simulated run measured."""

    signs: int
    busiest_interval: int  # signing requests in the busiest 30-minute interval
    mean_interval: float  # signing requests per 30-minute interval, on average
    typha_restarts: int
    busiest_cluster_hour: int  # Typha restarts in one cluster in its busiest hour
    busiest_cluster_run: int  # ... in its busiest 30-minute interval
    late: int  # renewals that came after the certificate expired (must be 0)


def next_run(offset: float, at: float) -> float:
    """The node's first Puppet run at or after `at` (seconds since START)."""
    k = max(0, math.ceil((at - offset) / RUN_INTERVAL))
    return offset + k * RUN_INTERVAL


def simulate(fleet: Fleet, spread: bool, bootstrap: bool) -> Figures:
    rng = random.Random(fleet.seed)
    base = PkiSettings(
        typha_lifetime=fleet.typha_lifetime,
        felix_lifetime=fleet.felix_lifetime,
        cluster_renew=fleet.cluster_renew,
    )
    end = fleet.days * 86400
    names = [f"kube{i:05d}.eqiad.wmnet" for i in range(fleet.nodes)]
    offsets = [rng.uniform(0, RUN_INTERVAL) for _ in names]
    settings = [replace(base, node_name=n if spread else None) for n in names]
    # (when the node's next run renews it, node, role, the leaf's not-after)
    events: list[tuple[float, int, RoleName, float]] = []

    def schedule(node: int, role: RoleName, issued: float) -> None:
        """Issued at `issued` (seconds since START): when does this node renew it?"""
        lifetime = base.lifetime(role).total_seconds()
        not_before = START + timedelta(seconds=issued)
        not_after = not_before + base.lifetime(role)
        moment = settings[node].renewal_moment(not_before, not_after)
        due = (moment - START).total_seconds()
        heapq.heappush(events, (next_run(offsets[node], due), node, role, issued + lifetime))

    for node in range(fleet.nodes):
        roles = [RoleName.FELIX]
        if node % fleet.cluster_size < fleet.typha_hosts:
            roles.append(RoleName.TYPHA)
        for role in roles:
            if bootstrap:
                issued = offsets[node]  # everyone's first run after the rollout
            else:  # steady state: issued at a random point before its renewal moment
                lifetime = base.lifetime(role)
                delay = settings[node].renewal_moment(START, START + lifetime) - START
                issued = offsets[node] - rng.uniform(0, delay.total_seconds())
            schedule(node, role, issued)

    per_interval: Counter[int] = Counter()
    restarts_hour: Counter[tuple[int, int]] = Counter()
    restarts_run: Counter[tuple[int, int]] = Counter()
    signs = restarts = late = 0
    while events and events[0][0] < end:
        when, node, role, expires = heapq.heappop(events)
        signs += 1
        late += when >= expires
        per_interval[int(when // RUN_INTERVAL)] += 1
        if role is RoleName.TYPHA:
            restarts += 1
            cluster = node // fleet.cluster_size
            restarts_hour[(cluster, int(when // 3600))] += 1
            restarts_run[(cluster, int(when // RUN_INTERVAL))] += 1
        schedule(node, role, when)
    intervals = math.ceil(end / RUN_INTERVAL)
    return Figures(
        signs=signs,
        busiest_interval=max(per_interval.values(), default=0),
        mean_interval=signs / intervals,
        typha_restarts=restarts,
        busiest_cluster_hour=max(restarts_hour.values(), default=0),
        busiest_cluster_run=max(restarts_run.values(), default=0),
        late=late,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--cluster-size", type=int, default=500)
    parser.add_argument("--typha-hosts", type=int, default=50, help="per cluster")
    parser.add_argument("--felix-hours", type=float, default=24)
    parser.add_argument("--typha-days", type=float, default=28)
    parser.add_argument("--days", type=float, default=30, help="simulated days")
    args = parser.parse_args()
    fleet = Fleet(
        nodes=args.nodes,
        cluster_size=args.cluster_size,
        typha_hosts=args.typha_hosts,
        felix_lifetime=timedelta(hours=args.felix_hours),
        typha_lifetime=timedelta(days=args.typha_days),
        days=args.days,
    )
    clusters = math.ceil(fleet.nodes / fleet.cluster_size)
    print(
        f"{fleet.nodes} nodes in {clusters} clusters ({fleet.typha_hosts} Typha hosts each), "
        f"Felix {describe_duration(fleet.felix_lifetime)}, Typha "
        f"{describe_duration(fleet.typha_lifetime)}, pki_renew_seconds "
        f"{fleet.cluster_renew and fleet.cluster_renew.total_seconds():.0f}, 30-minute runs, "
        f"{fleet.days:g} simulated days"
    )
    print("start      spread  signs  busiest-30min  mean-30min  typha-restarts  "
          "max/cluster/hour  max/cluster/30min  late")  # fmt: skip
    began = time.perf_counter()
    for bootstrap in (True, False):
        for spread in (False, True):
            f = simulate(fleet, spread, bootstrap)
            print(
                f"{'bootstrap' if bootstrap else 'steady':<10} {'yes' if spread else 'no':<7} "
                f"{f.signs:>6} {f.busiest_interval:>14} {f.mean_interval:>11.1f} "
                f"{f.typha_restarts:>15} {f.busiest_cluster_hour:>17} "
                f"{f.busiest_cluster_run:>18} {f.late:>5}"
            )
    print(f"simulated in {time.perf_counter() - began:.1f} s")


if __name__ == "__main__":
    main()
