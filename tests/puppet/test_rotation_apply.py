"""A CA rotation by hiera alone, under real `puppet apply` (docs/rotation.md).

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

In shipped mode the change is each node's shipped set (bundle, leaves, keys), made by
the stages' `issue` runs on the admin host's staging copies.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require, require_root, run_cli
from tests.support import gopeers
from tests.support import multirootca as multirootca_support
from tests.support.gopeers import GoPeers, exchange, felix_env, typha_env
from tests.support.multirootca import LABELS, RESTRICTED_KEYS, Multirootca
from tests.support.puppet import PuppetNode
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint

pytestmark = pytest.mark.once  # heavy end to end: CI's Debian leg only (tests/conftest.py)
restricted_multirootca = multirootca_support.restricted_multirootca
go_peers = gopeers.go_peers

OLD, NEW = LABELS
CLUSTER = "staging-eqiad"
NODES = {"kubestagemaster1001": "both", "kubestage1001": "felix", "kubestage1002": "felix"}
WORKER = "kubestage1001"
ROLES = {"both": [RoleName.TYPHA, RoleName.FELIX], "felix": [RoleName.FELIX]}
IDENTITY = {"typha_cn": "calico-typha", "felix_cn": "calico-node"}
COMMON = {
    # Neither the firewall nor monitoring rotates; without the fact, Facter runs no
    # typhapki at the start of each of the test's 48 applies.
    "typhapki::manage_ferm": False,
    "typhapki::manage_fact": False,
    "typhapki::manage_monitoring": False,
    "kubernetes::clusters_defaults": {"typha": {"key_type": "ecdsa-p256"}},
}


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


def _require() -> None:
    require("puppet", "facter")
    require_root()  # puppet apply as root manages owners and modes as on a node


def _node(root: Path, role: str, pki: Multirootca) -> PuppetNode:
    keys = {"typha": RESTRICTED_KEYS["typha"]} if role == "both" else {}
    keys["felix"] = RESTRICTED_KEYS["felix"]
    return PuppetNode(
        root,
        "cfssl",
        {
            "typhapki::certs::cfssl_url": pki.url,
            **{f"typhapki::certs::cfssl_auth_key_{r}": k for r, k in keys.items()},
            **COMMON,
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


def _issuer(out: Path, role: RoleName) -> str:
    return load_certs(SetPaths(out).cert(role), role.value)[0].issuer.rfc4514_string()


def _bundle(out: Path) -> set[str]:
    return {fingerprint(c) for c in load_certs(SetPaths(out).bundle, "bundle")}


@dataclass(frozen=True)
class Stage:
    """What each node's hiera holds at one stage, and what its set must then show."""

    data: Callable[[str], dict[str, Any]]  # node name -> its hiera keys
    bundle: set[str]  # fingerprints of the CAs in every node's bundle
    signer: str  # the subject of the CA that signed every leaf


def _walk(tmp_path: Path, nodes: list[PuppetNode], stages: list[Stage], peers: GoPeers) -> None:
    """Each stage's hiera change: one run per node converges, the next changes nothing;
    then mutual TLS between every Typha and every Felix one stage apart, both ways."""
    sets: list[dict[str, Path]] = []  # per stage, each node's set as it was
    for k, stage in enumerate(stages):
        for node in nodes:
            node.data.update(stage.data(node.root.name))
        assert _on_all(nodes, _apply) == [2] * len(nodes), f"stage {k}: one run converges"
        assert _on_all(nodes, _apply) == [0] * len(nodes), f"stage {k}: the next changes nothing"
        sets.append({})
        for node in nodes:
            name = node.root.name
            assert _bundle(node.out) == stage.bundle, (k, name)
            for role in ROLES[NODES[name]]:
                assert _issuer(node.out, role) == stage.signer, (k, name, role)
            if RoleName.TYPHA in ROLES[NODES[name]]:
                # Every stage changes Typha's leaf or its CA file, which Typha reads only
                # at start: each stage's converging run restarted it, once.
                assert node.log("restarts").count("typha") == k + 1, (k, name)
            sets[k][name] = _snapshot(node, tmp_path / f"stage{k}" / name)

    def accepted(typha: Path, felix: Path) -> bool:
        return exchange(peers, typha_env(typha), felix_env(felix)).accepted

    typhas = [n for n, role in NODES.items() if role == "both"]
    refused = [
        (k, t, f, behind)
        for k in range(len(stages) - 1)
        for t in typhas
        for f in NODES
        for behind, (ts, fs) in (("typha", (k, k + 1)), ("felix", (k + 1, k)))
        if not accepted(sets[ts][t], sets[fs][f])
    ]
    assert refused == []
    # Two stages apart: a stage-1 leaf (old CA) meets a stage-3 bundle (new CA alone).
    for t in typhas:
        assert not accepted(sets[3][t], sets[1][WORKER])


def test_cfssl_rotation_by_hiera_alone(
    tmp_path: Path, restricted_multirootca: Multirootca, go_peers: GoPeers
) -> None:
    """The cluster's label and typha.trust are the only changes."""
    _require()
    pki = restricted_multirootca
    pem = {label: pki.ca_cert(label).read_text() for label in LABELS}
    ca = {label: load_certs(pki.ca_cert(label), label)[0] for label in LABELS}
    fp = {label: fingerprint(cert) for label, cert in ca.items()}
    subject = {label: cert.subject.rfc4514_string() for label, cert in ca.items()}

    def stage(base: str, trust: list[str], bundle: set[str], signer: str) -> Stage:
        return Stage(lambda name: {"kubernetes::clusters": _clusters(base, trust)}, bundle, signer)

    nodes = [_node(tmp_path / name, role, pki) for name, role in NODES.items()]
    stages = [
        stage(OLD, [], {fp[OLD]}, subject[OLD]),
        stage(OLD, [pem[NEW]], {fp[OLD], fp[NEW]}, subject[OLD]),
        stage(NEW, [pem[OLD]], {fp[OLD], fp[NEW]}, subject[NEW]),
        stage(NEW, [], {fp[NEW]}, subject[NEW]),
    ]
    _walk(tmp_path, nodes, stages, go_peers)


def _shipped_set(where: Path, role: str, ca_dir: Path, trust: Path | None) -> dict[str, str]:
    """One node's set made on the admin host's staging copy, as hiera ships it."""
    extra = ("--trust", trust) if trust is not None else ()
    result = run_cli(
        "issue", "--ca-dir", ca_dir, "--out", where, "--role", role, *extra,
        "--typha-cn", IDENTITY["typha_cn"], "--felix-cn", IDENTITY["felix_cn"],
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    paths = SetPaths(where)
    data = {"typhapki::certs::shipped_bundle": paths.bundle.read_text()}
    for r in ROLES[role]:
        data[f"typhapki::certs::shipped_{r.value}_cert"] = paths.cert(r).read_text()
        data[f"typhapki::certs::shipped_{r.value}_key"] = paths.key(r).read_text()
    return data


def test_shipped_rotation_by_hiera_alone(tmp_path: Path, go_peers: GoPeers) -> None:
    """Each node's shipped set (bundle, leaves, keys) is the only change: the admin host
    runs the stages on its staging copies (docs/rotation.md, shipped sets)."""
    _require()
    cas = {"old": tmp_path / "ca-old", "new": tmp_path / "ca-new"}
    for ca_dir in cas.values():
        assert run_cli("ca", "init", "--ca-dir", ca_dir).returncode == 0
    ca = {k: load_certs(CaPaths(d).cert, k)[0] for k, d in cas.items()}
    fp = {k: fingerprint(cert) for k, cert in ca.items()}
    subject = {k: cert.subject.rfc4514_string() for k, cert in ca.items()}

    def stage(signing: str, trust: str | None, bundle: set[str]) -> Stage:
        def data(name: str) -> dict[str, Any]:
            trusted = CaPaths(cas[trust]).cert if trust is not None else None
            return _shipped_set(tmp_path / "staging" / name, NODES[name], cas[signing], trusted)

        return Stage(data, bundle, subject[signing])

    nodes = [
        PuppetNode(
            tmp_path / name,
            "shipped",
            {"kubernetes::clusters": _clusters(OLD, []), **COMMON},
            manifest=f"class {{ 'typhapki': cluster => '{CLUSTER}', role => '{role}' }}\n",
        )
        for name, role in NODES.items()
    ]
    stages = [
        stage("old", None, {fp["old"]}),
        stage("old", "new", {fp["old"], fp["new"]}),
        stage("new", "old", {fp["old"], fp["new"]}),
        stage("new", None, {fp["new"]}),
    ]
    _walk(tmp_path, nodes, stages, go_peers)
