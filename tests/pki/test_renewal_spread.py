"""Each node renews at its own moment inside the renewal window (no thundering herd)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from typhapki.pki.settings import RENEWAL_SPREAD, PkiSettings, renewal_spread

NAMES = st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,3}", fullmatch=True)


@settings(max_examples=200, deadline=None)
@given(
    name=NAMES,
    days=st.integers(min_value=1, max_value=3650),
    renew_days=st.one_of(st.none(), st.integers(min_value=1, max_value=400)),
)
def test_moment_stays_inside_the_window_and_is_deterministic(
    name: str, days: int, renew_days: int | None
) -> None:
    nb = datetime(2026, 1, 1, tzinfo=UTC)
    na = nb + timedelta(days=days)
    renew = timedelta(days=renew_days) if renew_days is not None else None
    s = PkiSettings(renew_before=renew, node_name=name)
    window = s.renew_window(na - nb)
    moment = s.renewal_moment(nb, na)
    assert na - window <= moment <= na - window * (1 - RENEWAL_SPREAD)
    assert moment == PkiSettings(renew_before=renew, node_name=name.upper() + ".").renewal_moment(
        nb, na
    )
    assert PkiSettings(renew_before=renew).renewal_moment(nb, na) == na - window


def test_a_fleet_is_spread_across_the_window() -> None:
    """1,000 nodes: every tenth of the spread gets some, none gets a herd."""
    places = [renewal_spread(f"kube{n:04d}.eqiad.wmnet") for n in range(1000)]
    buckets = [0] * 10
    for p in places:
        assert 0 <= p < 1
        buckets[int(p * 10)] += 1
    assert min(buckets) > 60 and max(buckets) < 140, buckets


def test_check_and_facts_report_the_node_s_own_moment(issued: Path) -> None:
    moments = {}
    for node in ("kube1001.eqiad.wmnet", "kube1002.eqiad.wmnet"):
        result = run_cli("check", "--out", issued, "--node-name", node)
        assert result.returncode == 0
        line = result.stdout.splitlines()[1]
        assert f"node {node} renews typha at " in line
        fact = json.loads(run_cli("facts", "--out", issued, "--node-name", node).stdout)
        typha = fact["typhapki"]["set"]["roles"]["typha"]
        assert fact["typhapki"]["set"]["node_name"] == node
        assert f"typha at {typha['renewal_due_at']}" in line
        start = typha["renewal_window_start"]
        assert start <= typha["renewal_due_at"] < typha["not_after"]
        moments[node] = typha["renewal_due_at"]
    assert len(set(moments.values())) == 2


# Lifetimes as the fleet runs them: staging's 24-72 hours, production's 28 days, a year.
LIFETIMES = st.one_of(
    st.integers(min_value=24 * 3600, max_value=72 * 3600),
    st.sampled_from([90 * 60, 24 * 3600, 28 * 86400, 365 * 86400]),
    st.integers(min_value=3600, max_value=3650 * 86400),
)
# The cluster's pki_renew_seconds: the fleet's 952200 (11 days plus a run), and others.
CLUSTER_RENEW = st.one_of(
    st.none(), st.just(952200), st.integers(min_value=60, max_value=400 * 86400)
)


@settings(max_examples=300, deadline=None)
@given(name=NAMES, lifetime=LIFETIMES, cluster_renew=CLUSTER_RENEW)
def test_pki_renew_seconds_counts_only_while_shorter_than_half_the_lifetime(
    name: str, lifetime: int, cluster_renew: int | None
) -> None:
    """Never a renewal on every run: a node renews no earlier than half the leaf's
    lifetime after issuance (two thirds by default), and always before it expires."""
    nb = datetime(2026, 1, 1, tzinfo=UTC)
    life = timedelta(seconds=lifetime)
    renew = timedelta(seconds=cluster_renew) if cluster_renew is not None else None
    s = PkiSettings(cluster_renew=renew, node_name=name)
    window = s.renew_window(life)
    if renew is not None and renew < life / 2:
        assert window == renew  # the cluster's own policy
    else:
        assert window == life / 3  # ignored: 2/3 of the actual lifetime
    moment = s.renewal_moment(nb, nb + life)
    assert nb + life / 2 <= moment < nb + life
    # --renew-before wins over both, whatever it is.
    assert PkiSettings(renew_before=life / 4, cluster_renew=renew).renew_window(life) == life / 4


def test_the_fleets_pki_renew_seconds_on_its_lifetimes() -> None:
    """The fleet's 952200 s: honoured for 28-day leaves, ignored for 24-72 h staging ones."""
    s = PkiSettings(cluster_renew=timedelta(seconds=952200))
    assert s.renew_window(timedelta(days=28)) == timedelta(seconds=952200)
    for hours in (24, 48, 72):
        assert s.renew_window(timedelta(hours=hours)) == timedelta(hours=hours) / 3
