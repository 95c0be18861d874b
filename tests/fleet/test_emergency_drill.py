"""The emergency walk at CI scale (tests/support/emergency_drill.py; the bench is
bench/bench_drill.py --walk emergency): 50 nodes with mTLS and the relaxed rule, the CA
key stolen, contained and rolled in two Typha rolls, against the suite's multirootca,
its real PuppetDB, the Apache front, the Kubernetes API stand-in, the Go peers and an
attacker in network namespaces (tests/support/attacker.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require, require_root, run_cli
from tests.support import gopeers
from tests.support import multirootca as multirootca_support
from tests.support.attacker import ATTACKER_ADDRESS, NODE_ADDRESS, attacker_lab
from tests.support.drill import RealFacts, Report, services
from tests.support.emergency_drill import EmergencyDrill, EmergencyReport
from tests.support.multirootca import Multirootca
from tests.support.puppetdb import PuppetDB

multirootca = multirootca_support.multirootca
go_peers = gopeers.go_peers
NODES = 50
# The phases in which Typha hosts restart: each Typha host's run that writes the new
# leaf (or bundle) leaves the marker its restart-typha acts on at once.
ROLLING = {"2 typha leaf", "3 typha roll 1", "5a drop", "5b typha roll 2"}
# The phases that start with a hiera change: fleet ready holds each back at first.
STEPPED = {"0 contain", "1 trust", "2 typha leaf", "4 felix leaf", "5a drop"}


@pytest.fixture(scope="module")
def walked(
    multirootca: Multirootca,
    puppetserver: Any,
    puppetdb: PuppetDB,
    go_peers: gopeers.GoPeers,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[EmergencyReport, Report]]:
    require("go", "apache2", "kubectl", "ferm")
    require_root()
    work = tmp_path_factory.mktemp("emergency")
    peers = (go_peers.typhaserver, go_peers.felixclient)
    facts = RealFacts(puppetdb, puppetserver.tls)
    with (
        services(work, multirootca, facts, peers) as svc,
        attacker_lab(*peers, work / "lab", NODE_ADDRESS, ATTACKER_ADDRESS) as lab,
    ):
        drill = EmergencyDrill(svc, work, lab=lab, nodes=NODES, log=print)
        try:
            result = drill.run_emergency()
        finally:
            drill.close()
    print("\n".join(drill.report.lines()))
    print("\n".join(result.lines()))
    yield result, drill.report


@pytest.mark.once  # heavy: CI's Debian leg, beside its PuppetDB (tests/conftest.py)
def test_the_attacker_is_shut_out_at_step_0_and_at_the_handshake_after_roll_2(
    walked: tuple[EmergencyReport, Report],
) -> None:
    report, _ = walked
    seen = {(phase, who): verdict for _, phase, who, verdict in report.attacker}
    by_phase: dict[str, set[str]] = {}
    for _, phase, who, verdict in report.attacker:
        by_phase.setdefault(f"{phase}|{who}", set()).add(verdict)
    assert by_phase["day 0|attacker"] == {"accepted"}
    # From step 0 on: in once the Typha host's run wrote the strict rule, never again.
    later = [v for t, p, w, v in report.attacker if w == "attacker" and p != "day 0"]
    assert "firewall" in later
    assert later[later.index("firewall") :] == ["firewall"] * len(later[later.index("firewall") :])
    # A node's address gets past the firewall; the old CA is trusted until roll 2.
    assert by_phase["0 contain|node"] == {"accepted"}
    assert seen[("done", "node")] == "handshake"
    assert seen[("done", "attacker")] == "firewall"
    assert report.exposure <= 1.0  # each Typha host's next run closes it


@pytest.mark.once
def test_the_fleet_rolls_typha_twice_and_never_calico_node(
    walked: tuple[EmergencyReport, Report],
) -> None:
    report, fleet = walked
    assert fleet.failures == [] and fleet.refused == 0, fleet.failures[:5]
    assert fleet.attempted >= 10 * NODES
    # Two rolls, each asked for by one hiera step's restart markers, each Typha host
    # once in each.
    assert report.rolls == 2
    for step in ("typha-leaf", "drop"):
        assert sorted(h for _, h, s in report.evictions if s == step) == report.typha_hosts
    assert report.max_terminating == 1
    assert report.pod_restarts == 0
    assert report.felixes_330 == NODES // 2 and report.felix_exits > 0


@pytest.mark.once
def test_every_step_waits_for_its_gate(walked: tuple[EmergencyReport, Report]) -> None:
    report, _ = walked
    assert [p.name for p in report.phases] == [
        "0 contain", "1 trust", "2 typha leaf", "3 typha roll 1", "4 felix leaf", "5a drop",
        "5b typha roll 2",
    ]  # fmt: skip
    assert report.early_passes == []
    assert report.skip_refused == 1 and "trust" in report.skip_words
    # Only the rolls' phases take Typha restarts (a Typha host's run that writes its new
    # leaf or bundle runs restart-typha at once: roll 1 may be over with step 2).
    for phase in report.phases:
        assert phase.restarts == 0 or phase.name in ROLLING, phase
    assert report.early_refusals == {p.name: 1 for p in report.phases if p.name in STEPPED}


@pytest.mark.once
def test_a_node_decommissioned_at_trust_gets_no_new_leaf_and_is_shut_out(
    walked: tuple[EmergencyReport, Report],
) -> None:
    """Issue 41 item 3: the node that leaves right after step trust (the planned walk's
    decommission: cluster_nodes, PuppetDB, the PKI front's CRL) is out of each Typha
    host's next strict rule, gets no new-CA leaf, is refused by every Typha after roll
    2, and holds no `fleet ready` back."""
    report, fleet = walked
    gone = fleet.decommission
    start = gone["decommissioned"]
    assert report.decommissioned and start == report.decommissioned_at
    # The firewall: it was in every Typha host's strict rule, and is out of each one's
    # first rule after it left (the real `typhapki ferm` output), within an interval.
    assert report.decom_listed_before == set(report.typha_hosts)
    assert sorted(report.decom_rule) == report.typha_hosts
    for host, (when, listed) in report.decom_rule.items():
        assert not listed and start < when <= start + report.interval, (host, when)
    assert gone["firewall"] == max(when for when, _ in report.decom_rule.values())
    # No new-CA leaf: the front refused its issue (its CRL); nothing else signed one.
    assert "refused this node's client certificate" in fleet.decommission_error
    assert start < gone["pki_refused"] < report.roll_2_done
    assert not report.decom_leaf_new
    # After roll 2 every Typha refuses its leaf at the handshake (the firewall first).
    assert gone["typhas_refuse"] >= report.roll_2_done
    assert len(fleet.decommission_probe) == len(report.typha_hosts)
    assert not any(o["ok"] for o in fleet.decommission_probe), fleet.decommission_probe
    assert fleet.stopped_by in ("firewall", "pki_refused")
    assert gone["firewall"] < gone["typhas_refuse"]
    # fleet ready judged members only: never named it, and the walk went on.
    assert report.decom_named_by_ready == 0
    assert report.phases[-1].name == "5b typha roll 2"


def test_a_felix_of_330_exits_on_each_lost_connection(
    go_peers: gopeers.GoPeers, tmp_path: Path
) -> None:
    """felixclient -batch "exits" (tests/peers/felixclient/batch.go): a Calico 3.30
    Felix's process ends at the loss and after each failed try, one of 3.31 and later
    reconnects in-process; both reach the Typha that accepts them within the budget."""
    out = tmp_path / "out"
    env = {"TYPHAPKI_STATE_DIR": str(tmp_path / "state")}
    assert run_cli("ca", "init", "--ca-dir", tmp_path / "ca", env=env).returncode == 0
    assert run_cli("issue", "--ca-dir", tmp_path / "ca", "--out", out, env=env).returncode == 0
    typha = subprocess.Popen(
        [str(go_peers.typhaserver), "-conns", "2", "-accept-timeout", "20s"],
        env=gopeers.typha_env(out), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert typha.stdout is not None
    port = typha.stdout.readline().strip()
    leaf = {"tls": True, "cert": str(out / "calico-node-certs" / "calico-node.crt"),
            "key": str(out / "calico-node-certs" / "calico-node.key"),
            "ca": str(out / "calico-typha-ca" / "typhaca.crt"), "cn": "calico-typha"}  # fmt: skip
    # The first address is a Typha that is gone (nothing listens on port 1).
    addrs = ["127.0.0.1:1", f"127.0.0.1:{port}"]
    requests = [{"id": "felix-331", "addrs": addrs, "tries": 6, **leaf},
                {"id": "felix-330", "addrs": addrs, "tries": 6, "exits": True, **leaf}]  # fmt: skip
    proc = subprocess.run(
        [str(go_peers.felixclient), "-batch", "-parallel", "1", "-timeout", "3s"],
        input="".join(json.dumps(r) + "\n" for r in requests), capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    outcomes = {o["id"]: o for o in map(json.loads, proc.stdout.splitlines())}
    typha.communicate(timeout=30)
    assert typha.returncode == 0  # both accepted, by its own log
    for felix in outcomes.values():
        assert felix["ok"] and felix["attempts"] == 2, felix
    assert outcomes["felix-331"]["exits"] == 0
    assert outcomes["felix-330"]["exits"] == 2  # at the loss, and after the failed try
