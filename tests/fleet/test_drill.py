"""The fleet drill at CI scale (tests/support/drill.py; the bench is bench/bench_drill.py):
50 nodes walked through the live switch to mTLS and a CA rotation (every leaf replaced)
and a decommission, against the suite's multirootca and its one real PuppetDB (behind the
shared puppetserver: every Puppet run's `replace facts`, asked over HTTPS with the
server's certificate), the Apache front, the Kubernetes API stand-in and the Go Typha and
Felix peers."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import require, require_root
from tests.support import gopeers
from tests.support import multirootca as multirootca_support
from tests.support.drill import CLUSTER, Drill, RealFacts, Report, services
from tests.support.multirootca import Multirootca
from tests.support.puppetdb import PuppetDB

pytestmark = pytest.mark.once  # heavy: CI's Debian leg, beside its PuppetDB (tests/conftest.py)

multirootca = multirootca_support.multirootca
go_peers = gopeers.go_peers
NODES = 50


@pytest.fixture(scope="module")
def report(
    multirootca: Multirootca,
    puppetserver: Any,
    puppetdb: PuppetDB,
    go_peers: gopeers.GoPeers,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Report]:
    require("go", "apache2", "kubectl")
    require_root()
    work = tmp_path_factory.mktemp("drill")
    peers = (go_peers.typhaserver, go_peers.felixclient)
    facts = RealFacts(puppetdb, puppetserver.tls)
    with services(work, multirootca, facts, peers) as svc:
        drill = Drill(svc, work, nodes=NODES, log=print, renewals=True)
        try:
            result = drill.run()
        finally:
            drill.close()  # deactivates the drill's nodes
    print("\n".join(result.lines()))
    yield result


def test_the_drill_used_the_real_puppetdb(report: Report, puppetdb: PuppetDB) -> None:
    """Every member's Puppet run uploaded its facts; the gates read them back; at the end
    no drill node is left active for another test's query over every cluster."""
    assert report.puppetdb == "RealFacts"
    assert report.fact_uploads >= 5 * NODES  # each member, every interval of 7
    assert report.phases.get("puppetdb", 0) > 0
    left = puppetdb.query("resources", ["=", ["parameter", "cluster"], CLUSTER])
    assert left == []


def test_every_reconnect_reaches_an_accepting_typha(report: Report) -> None:
    """Except while a node's own calico-node pod restarts (and the decommissioned node)."""
    assert report.attempted >= 20 * NODES
    assert report.failures == []
    assert report.refused == report.refused_while_restarting
    # The Typhas' own logs agree: one accepted connection per accepted reconnect at least
    # (the TLS Typha hosts' probes add theirs).
    assert (
        report.typha_accepted >= report.attempted - report.refused - report.decommissioned_refused
    )


def test_the_decommissioned_node_is_stopped_three_ways(report: Report) -> None:
    gone = report.decommission
    assert {"pki_refused", "firewall", "typhas_refuse"} <= gone.keys(), gone
    # Each only after the decommission: the rule at the Typha hosts' next runs, the
    # front at the first run that needs a leaf (reissue), the Typhas after drop-old.
    # (With leaves renewed by the clock, the front may refuse a renewal before the rule.)
    assert gone["decommissioned"] < gone["firewall"] <= gone["decommissioned"] + 3600
    assert gone["decommissioned"] < gone["pki_refused"] <= gone["typhas_refuse"]
    assert gone["firewall"] <= gone["typhas_refuse"]
    assert report.stopped_by in ("pki_refused", "firewall", "typhas_refuse")
    assert report.decommissioned_refused > 0
    assert "refused this node's client certificate" in report.decommission_error
    assert report.decommission_probe and not any(o["ok"] for o in report.decommission_probe)


def test_leaves_renew_by_the_clock_under_traffic(report: Report) -> None:
    """Leaves of the brief profiles (tests/support/multirootca.py) age during the walk:
    `check` finds them due and `issue` renews them, and no reconnect is refused for it
    (every refusal is already accounted for above)."""
    assert report.renewals > 0
    assert f"renewals: {report.renewals} leaves renewed by the clock" in "\n".join(report.lines())
    assert report.failures == []


def test_no_stage_advances_early(report: Report) -> None:
    assert report.early_refusals == {"switch": 1, "retire": 1, "reissue": 1, "drop-old": 1}
    assert report.early_passes == []
    for stage in report.stages:
        assert stage.took <= stage.limit, stage.line()


def test_at_most_one_typha_restarts_at_a_time(report: Report) -> None:
    # Each of the rotation's three stages changes every Typha host's set: a restart each.
    assert report.typha_restarts >= 3 * 3
    assert report.max_typha_restarting == 1


def test_the_report_says_it_all(report: Report) -> None:
    text = "\n".join(report.lines())
    assert f"{report.attempted} reconnects attempted, {report.refused} refused" in text
    for stage in ("parallel", "switch", "to retire", "trust-new", "reissue", "drop-old"):
        assert any(s.name == stage for s in report.stages), stage
    assert "roll steps (limit" in text
    assert f"stopped first by {report.stopped_by}" in text
    # The hiera gate never refuses what fleet ready and the model agree on, for the live
    # switch and the rotation alike (docs/rotation.md's cfssl reissue change moves the
    # label and swaps the trusted CA in one change: one move).
    assert report.gate_findings == {}
