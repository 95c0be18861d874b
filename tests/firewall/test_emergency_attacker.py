"""issue 41: the stolen CA key's holder against each rule the emergency writes, in the
kernel (tests/support/attacker.py): real `typhapki ferm` output loaded by ferm in a
network namespace, the Go Typha loading the Typha host's set once at start, the Go Felix
in the attacker's namespace holding a leaf minted with the stolen key.

Local CA mode, one Typha host: the fleet's walk of the same steps is the emergency drill
(tests/support/emergency_drill.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require, run_cli
from tests.support import gopeers
from tests.support.attacker import AttackerLab, attacker_lab, node_leaf, stolen_leaf

go_peers = gopeers.go_peers

NODE, ATTACKER = "10.64.0.10", "10.64.0.250"  # the attacker: same /24, not in cluster_nodes


@pytest.fixture
def lab(go_peers: gopeers.GoPeers, tmp_path: Path) -> Iterator[AttackerLab]:
    require("ferm")
    with attacker_lab(
        go_peers.typhaserver, go_peers.felixclient, tmp_path / "lab", NODE, ATTACKER
    ) as made:
        yield made


def hiera(path: Path, mode: str) -> Path:
    path.write_text(
        "kubernetes::clusters:\n  main:\n    lab41:\n"
        f"      cluster_nodes: [{NODE}]\n"
        f"      typha: {{tls_stage: retire, mode: {mode}}}\n"
    )
    return path


def rule(tmp_path: Path, mode: str) -> str:
    """The rule `typhapki ferm` writes for MODE (the relaxed rule's mTLS proof is the
    pipeline's own test: tests/commands/test_ferm_mtls.py)."""
    made = run_cli(
        "ferm", "--hiera", hiera(tmp_path / f"{mode}.yaml", mode), "--cluster", "lab41",
        "--skip-mtls-proof", env={"TYPHAPKI_STATE_DIR": str(tmp_path / "state")},
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return made.stdout


def test_the_attacker_is_shut_out_by_the_rule_then_by_typha(
    lab: AttackerLab, tmp_path: Path
) -> None:
    """Before step 0 the relaxed rule lets the stolen key's leaf in from anywhere in the
    subnet; from step 0 the strict rule drops it at the firewall, while a node address
    still gets in with it (old-CA client leaves are accepted until roll 2); after roll 2
    Typha refuses it at the handshake even from the node's address, and the node's own
    new leaf is accepted."""
    old, new, out = tmp_path / "ca-old", tmp_path / "ca-new", tmp_path / "out"
    env = {"TYPHAPKI_STATE_DIR": str(tmp_path / "state")}
    for ca in (old, new):
        assert run_cli("ca", "init", "--ca-dir", ca, env=env).returncode == 0
    assert run_cli("issue", "--ca-dir", old, "--out", out, env=env).returncode == 0
    stolen = stolen_leaf(old / "typhaca.crt", old / "typhaca.key", tmp_path / "thief",
                         [old / "typhaca.crt", new / "typhaca.crt"])  # fmt: skip
    lab.start_typha(out)

    relaxed, strict = rule(tmp_path, "relaxed"), rule(tmp_path, "strict")
    assert "10.64.0.0/24" in relaxed and "10.64.0.0/24" not in strict
    lab.load(relaxed)
    assert lab.verdict("attacker", stolen) == "accepted"
    assert lab.verdict("node", node_leaf(out)) == "accepted"

    lab.load(strict)  # step 0
    assert lab.verdict("attacker", stolen) == "firewall"
    assert lab.verdict("node", stolen) == "accepted"  # the door roll 2 closes
    assert lab.verdict("node", node_leaf(out)) == "accepted"

    # Steps 1 to 5a leave the new CA alone in the bundle and every leaf new; roll 2.
    trust = ("--trust", new / "typhaca.crt")
    assert run_cli("issue", "--ca-dir", old, *trust, "--out", out, env=env).returncode == 0
    assert run_cli("issue", "--ca-dir", new, "--out", out, env=env).returncode == 0
    assert lab.verdict("node", stolen) == "accepted"  # Typha read its files at start
    lab.start_typha(out)  # roll 2
    assert lab.verdict("node", stolen) == "handshake"
    assert lab.verdict("attacker", stolen) == "firewall"
    assert lab.verdict("node", node_leaf(out)) == "accepted"
