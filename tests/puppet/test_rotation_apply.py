"""A CA rotation by hiera alone, under real `puppet apply` (docs/rotation.md, cfssl mode).

A Typha host (role both) and two workers (felix) run the module against a real
multirootca with docs/issuance.md's restricted configuration (a key per profile), whose
two labels hold two intermediates under one root. Each stage is one change of the
cluster's mapping in `kubernetes::clusters`, nothing typed on a node:

| stage | hiera of the cluster | bundle | leaves |
|---|---|---|---|
| 0 | `pki_intermediate_base: cluster2025` | old | old |
| 1 | + `typha.trust: [new]` | old + new | old |
| 2 | `pki_intermediate_base: cluster2026`, `typha.trust: [old]` | new + old | new |
| 3 | `typha.trust` gone | new | new |

After each change one run per node converges (exit 2) and the next changes nothing
(exit 0). Then the Go Typha and Felix peers (tests/peers) complete mutual TLS between
every Typha and every Felix one stage apart, in both directions, with the files the
module wrote; two stages apart, Typha refuses.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require, require_root
from tests.support import gopeers
from tests.support import multirootca as multirootca_support
from tests.support.gopeers import GoPeers, exchange, felix_env, typha_env
from tests.support.multirootca import LABELS, RESTRICTED_KEYS, Multirootca
from tests.support.puppet import PuppetNode
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint

pytestmark = pytest.mark.once  # heavy end to end: CI's Debian leg only (tests/conftest.py)
restricted_multirootca = multirootca_support.restricted_multirootca
go_peers = gopeers.go_peers

OLD, NEW = LABELS
CLUSTER = "staging-eqiad"
NODES = {"kubestagemaster1001": "both", "kubestage1001": "felix", "kubestage1002": "felix"}
IDENTITY = {"typha_cn": "calico-typha", "felix_cn": "calico-node"}


def _clusters(base: str, trust: list[str]) -> dict[str, Any]:
    """`kubernetes::clusters` as the fleet's hiera holds it, at one stage."""
    typha: dict[str, Any] = dict(IDENTITY)
    if trust:
        typha["trust"] = trust
    return {
        "main": {
            CLUSTER: {
                "dc": "eqiad",
                "cluster_nodes": [f"{n}.eqiad.wmnet" for n in NODES],
                "pki_intermediate_base": base,
                "typha": typha,
            }
        }
    }


def _node(root: Path, role: str, pki: Multirootca) -> PuppetNode:
    keys = {"typha": RESTRICTED_KEYS["typha"]} if role == "both" else {}
    keys["felix"] = RESTRICTED_KEYS["felix"]
    return PuppetNode(
        root,
        "cfssl",
        {
            "typhapki::certs::cfssl_url": pki.url,
            **{f"typhapki::certs::cfssl_auth_key_{r}": k for r, k in keys.items()},
            "typhapki::manage_ferm": False,  # the firewall is not what rotates
            "kubernetes::clusters_defaults": {"typha": {"key_type": "ecdsa-p256"}},
        },
        manifest=f"class {{ 'typhapki': cluster => '{CLUSTER}', role => '{role}' }}\n",
    )


def _on_all(nodes: list[PuppetNode], step: Callable[[PuppetNode], int]) -> list[int]:
    """One step on every node at once: their roots, confdirs and vardirs are apart."""
    with ThreadPoolExecutor(len(nodes)) as pool:
        return list(pool.map(step, nodes))


def _apply(node: PuppetNode) -> int:
    return node.apply().returncode


def _snapshot(node: PuppetNode, where: Path) -> Path:
    """The node's set as its pods would mount it at this stage (links followed)."""
    shutil.copytree(node.out, where, symlinks=False, ignore=shutil.ignore_patterns(".*"))
    return where


def _issuers(out: Path, role: RoleName) -> str:
    return load_certs(SetPaths(out).cert(role), role.value)[0].issuer.rfc4514_string()


def _bundle(out: Path) -> set[str]:
    return {fingerprint(c) for c in load_certs(SetPaths(out).bundle, "bundle")}


def test_cfssl_rotation_by_hiera_alone(
    tmp_path: Path, restricted_multirootca: Multirootca, go_peers: GoPeers
) -> None:
    require("puppet", "facter")
    require_root()  # puppet apply as root manages owners and modes as on a node
    pki = restricted_multirootca
    pem = {label: pki.ca_cert(label).read_text() for label in LABELS}
    fp = {label: fingerprint(load_certs(pki.ca_cert(label), label)[0]) for label in LABELS}
    subject = {
        label: load_certs(pki.ca_cert(label), label)[0].subject.rfc4514_string() for label in LABELS
    }
    nodes = [_node(tmp_path / name, role, pki) for name, role in NODES.items()]
    stages = [
        (_clusters(OLD, []), {fp[OLD]}, OLD),
        (_clusters(OLD, [pem[NEW]]), {fp[OLD], fp[NEW]}, OLD),
        (_clusters(NEW, [pem[OLD]]), {fp[OLD], fp[NEW]}, NEW),
        (_clusters(NEW, []), {fp[NEW]}, NEW),
    ]
    sets: list[dict[str, Path]] = []  # per stage, each node's set as it was
    for k, (clusters, bundle, signer) in enumerate(stages):
        for node in nodes:
            node.data["kubernetes::clusters"] = clusters
        assert _on_all(nodes, _apply) == [2, 2, 2], f"stage {k}: one run converges"
        assert _on_all(nodes, _apply) == [0, 0, 0], f"stage {k}: the next changes nothing"
        sets.append({})
        for node, role in zip(nodes, NODES.values(), strict=True):
            assert _bundle(node.out) == bundle, (k, node.root.name)
            for r in [RoleName.TYPHA, RoleName.FELIX] if role == "both" else [RoleName.FELIX]:
                assert _issuers(node.out, r) == subject[signer], (k, node.root.name, r)
            sets[k][node.root.name] = _snapshot(node, tmp_path / f"stage{k}" / node.root.name)

    typhas = [n for n, role in NODES.items() if role == "both"]

    def accepted(typha: Path, felix: Path) -> bool:
        result = exchange(go_peers, typha_env(typha), felix_env(felix))
        return result.accepted

    # Every Typha and every Felix one stage apart, both ways, with the module's files.
    refused = [
        (k, t, f, direction)
        for k in range(len(stages) - 1)
        for t in typhas
        for f in NODES
        for direction, (ts, fs) in (("typha behind", (k, k + 1)), ("felix behind", (k + 1, k)))
        if not accepted(sets[ts][t], sets[fs][f])
    ]
    assert refused == []
    # Two stages apart a stage-1 leaf (old CA) meets a stage-3 bundle (new CA alone).
    for t in typhas:
        assert not accepted(sets[3][t], sets[1]["kubestage1001"])
