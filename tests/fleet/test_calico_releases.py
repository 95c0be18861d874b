"""A fleet half on Calico 3.32 and half on 3.33 (typhapki/calico.py): each member's
`felix_typha` evidence comes from a real `typhapki facts` run over real processes of
its release's shape, and `fleet ready --stage retire` passes once every Felix, of
either shape, dials TLS (the PuppetDB and Kubernetes API stand-ins of
tests/fleet/test_switch.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_root, run_cli
from tests.fleet.test_switch import NODES, NOW, kube, kubeconfig
from tests.support.gopeers import felix_env, typha_env
from tests.support.processes import ROOT, TYPHA_UID, Node
from tests.support.puppetdb import StandIn, StandInNode, valid_fact
from typhapki.calico import BY_VERSION, Release
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK

__all__ = ["kube", "kubeconfig"]  # the stand-in API, shared with test_switch.py


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    require_root()
    found = Node(monkeypatch)
    yield found
    found.close()


def _member(
    node: Node, out: Path, release: Release, felix_tls: bool, hostile: bool = False
) -> dict[str, Any]:
    """The fact of a node running `release`'s Typha (TLS) and Felix, as PuppetDB holds
    it: the fleet's valid set, with this node's real runtime evidence. `hostile`: a
    second Typha whose TYPHA_SERVERPORT is no port runs beside them."""
    pids = [node.start(release.typha.argv, typha_env(out), TYPHA_UID)]
    felix = node.start(release.felix.argv, felix_env(out) if felix_tls else {}, ROOT)
    if hostile:
        pids.append(node.start(release.typha.argv, {"TYPHA_SERVERPORT": "5\u00b2"}, ROOT))
    result = run_cli("facts", "--out", out, "--no-probe")
    for pid in (*pids, felix):
        node.stop(pid)
    fact = json.loads(result.stdout)["typhapki"]
    assert [row["error"] is not None for row in fact["typhas"]] == [False, *([True] * hostile)]
    assert fact["felix_typha"]["running"] and fact["felix_typha"]["pid"] == felix
    return {**valid_fact(NOW, "c1"), "felix_typha": fact["felix_typha"], "typhas": fact["typhas"]}


def test_retire_passes_once_every_felix_of_either_shape_dials_tls(
    standin: StandIn, kubeconfig: Path, issued: Path, node: Node
) -> None:
    old, new = BY_VERSION["3.32"], BY_VERSION["3.33"]
    assert old.felix != new.felix
    # Each node of the half on 3.33 also runs a hostile Typha: its row cannot be
    # judged, and the rest of the node's evidence stands.
    members = [(NODES[0], old, True), (NODES[1], new, True), (NODES[2], new, False)]
    standin.nodes = {
        name: StandInNode("c1", _member(node, issued, release, tls, release is new))
        for name, release, tls in members
    }

    def ready() -> Any:
        return run_cli("fleet", "ready", "--puppetdb", standin.url, "--cluster", "c1",
                       "--stage", "retire", "--kubeconfig", kubeconfig)  # fmt: skip

    held = ready()
    assert held.returncode == EXIT_NEEDS_ACTION, held.stdout + held.stderr
    assert held.stdout.splitlines() == [f"{NODES[2]}: its running Felix dials plain Typha"]
    # The 3.33 node's calico-node pod rolled with the TLS settings.
    standin.nodes[NODES[2]].fact = _member(node, issued, new, True, hostile=True)
    passed = ready()
    assert passed.returncode == EXIT_OK, passed.stdout + passed.stderr
