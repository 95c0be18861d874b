"""bench/bench_lifecycle.py: the simulation behind the fleet's figures keeps its promises.

The figures themselves are the bench's to print; here, on a small fleet, what must hold
whatever the machine: no certificate outlives its renewal (nothing late), no node renews
more often than every half lifetime (no reissue loop, the cluster's pki_renew_seconds
included on 24-72 hour staging leaves), and the spread lowers a bootstrapped fleet's peak.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from bench.bench_lifecycle import Fleet, simulate


@pytest.mark.parametrize("felix_hours", [24, 48, 72])
def test_staging_lifetimes_renew_in_time_and_never_every_run(felix_hours: int) -> None:
    felix = timedelta(hours=felix_hours)
    fleet = Fleet(nodes=200, cluster_size=100, typha_hosts=10, felix_lifetime=felix, days=8)
    for spread in (False, True):
        figures = simulate(fleet, spread=spread, bootstrap=True)
        assert figures.late == 0
        # pki_renew_seconds (11 days) is ignored for these leaves: a renewal window of
        # 11 days would reissue on every run, 16 a day per node.
        most = fleet.nodes * (fleet.days * 86400 / (felix.total_seconds() / 2) + 1)
        assert figures.signs <= most + fleet.nodes // 10 * 2


def test_the_spread_lowers_a_bootstrapped_fleets_busiest_interval() -> None:
    fleet = Fleet(nodes=400, cluster_size=200, typha_hosts=20, days=3)
    without = simulate(fleet, spread=False, bootstrap=True)
    with_spread = simulate(fleet, spread=True, bootstrap=True)
    assert with_spread.busiest_interval < without.busiest_interval / 2
    assert with_spread.late == without.late == 0
