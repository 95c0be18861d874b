"""The one stage-move rule (typhapki/fleet/moves.py): generated moves over the whole
table, `fleet gate` refusing from hiera alone (the outage of issue 38: retire removed
with exit 0), the rollback of rotation stage 1 judged by the leaves the members hold,
and docs/fleet.md printing the rule's own table."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import ROOT, run_cli
from tests.support.puppetdb import StandIn, StandInNode, valid_fact
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK
from typhapki.fleet import moves
from typhapki.fleet.gate import RotationKeys, advances
from typhapki.settings.wiring import Stage

# The issue's table, written out independently of the module: the live switch's order,
# none and all-at-once both before parallel.
ORDER = {"none": 0, "all-at-once": 0, "parallel": 1, "switch": 2, "retire": 3}
GATED = {("parallel", "switch"): "switch", ("switch", "retire"): "retire"}
LIVE = st.sampled_from(sorted(ORDER))


def _expected(source: str, target: str) -> tuple[bool, str | None]:
    """(allowed, gate) as the issue's table says."""
    a, b = ORDER[source], ORDER[target]
    if a == b == 0:
        return True, None  # none and all-at-once: the same one Typha
    forward = b == a + 1
    back = b == a - 1 and b >= 1  # never back to none or all-at-once
    return forward or back, GATED.get((source, target))


@settings(max_examples=50)
@given(source=LIVE, target=LIVE)
def test_every_live_switch_move_as_the_table_says(source: str, target: str) -> None:
    move = moves.judge(moves.LIVE_SWITCH, source, target)
    if source == target:
        assert move is None
        return
    assert move is not None
    allowed, gate = _expected(source, target)
    assert (move.allowed, move.gate) == (allowed, gate), move
    if not allowed:
        backwards = ORDER[target] == 0 and ORDER[source] > 0
        outage = moves.OUTAGE if source == "parallel" else moves.CUTS_FELIX
        assert move.why == (outage if backwards else moves.SKIPS)


def test_the_table_knows_every_stage_and_no_move_twice() -> None:
    assert set(moves.live_stages()) == set(ORDER) == {"none", *(s.value for s in Stage)}
    rows = [(m.track, m.source, m.target) for m in moves.TABLE]
    assert len(rows) == len(set(rows))
    # All 25 pairs once, besides the generated ones above: no move of the table unseen.
    for source in ORDER:
        for target in ORDER:
            move = moves.judge(moves.LIVE_SWITCH, source, target)
            if move is not None:
                assert (move.allowed, move.gate) == _expected(source, target), move
    assert moves.judge(moves.LIVE_SWITCH, None, "retire") == moves.judge(
        moves.LIVE_SWITCH, "none", "retire"
    )


PEM_OLD, PEM_NEW = json.dumps("old CA"), json.dumps("new CA")


@st.composite
def _keys(draw: st.DrawFn) -> RotationKeys:
    trust = draw(st.sets(st.sampled_from([PEM_OLD, PEM_NEW]), max_size=2))
    signer = draw(st.sampled_from([None, "lab2025", "lab2026"]))
    stage = draw(st.sampled_from([None, *(s.value for s in Stage)]))
    step = draw(st.sampled_from([None, "contain", "trust", "typha-leaf", "felix-leaf", "drop",
                                 "done"]))  # fmt: skip
    return RotationKeys(frozenset(trust), signer, stage, step, "b" * 64 if step else None)


@settings(max_examples=50)
@given(before=_keys(), after=_keys())
def test_every_hiera_change_is_judged_by_the_rule(
    before: RotationKeys, after: RotationKeys
) -> None:
    found = advances({"c": before}, {"c": after})
    switch = [a for a in found if a.move.track == moves.LIVE_SWITCH]
    if before.tls_stage == after.tls_stage:
        assert not switch
    else:
        [one] = switch
        allowed, gate = _expected(before.tls_stage or "none", after.tls_stage or "none")
        assert (one.move.allowed, one.gate) == (allowed, gate)
    # The emergency's step moves as the one rule says, with the new tree's new CA.
    emergency = [a for a in found if a.move.track == moves.EMERGENCY]
    if before.emergency == after.emergency:
        assert not emergency
    else:
        [one] = emergency
        assert one.move == moves.judge(moves.EMERGENCY, before.emergency, after.emergency)
        assert one.new_ca == after.emergency_ca
    rotation = [a for a in found if a.move.track == moves.ROTATION]
    # Every rotation move is a row of the table, never made up on the way.
    assert all(a.move in moves.TABLE for a in rotation)
    if before.signer != after.signer and not before.trust:
        assert [a.move.allowed for a in rotation] == [False]  # skips trust-new
    dropped = [a for a in rotation if a.gate == moves.NO_LEAF]
    assert bool(dropped) == (bool(before.trust - after.trust) and not (
        before.signer != after.signer and after.trust - before.trust
    ))  # fmt: skip


def _repo(tmp_path: Path, typha: dict[str, Any]) -> Path:
    git = ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t.invalid"]
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "h").mkdir()
    _hiera(tmp_path / "h" / "c.yaml", typha)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "a"], check=True)
    return tmp_path / "h"


def _hiera(path: Path, typha: dict[str, Any]) -> Path:
    cluster: dict[str, Any] = {"cluster_nodes": ["10.64.0.1"]}
    if typha:
        cluster["typha"] = typha
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {"lab": cluster}}}))
    return path


@pytest.mark.parametrize("stage", ["retire", "switch", "parallel"])
def test_the_issue_repro_is_refused_without_puppetdb(tmp_path: Path, stage: str) -> None:
    """Issue 38: removing `tls_stage: retire` (or switch) passed with exit 0."""
    hiera = _repo(tmp_path, {"tls_stage": stage})
    _hiera(hiera / "c.yaml", {})
    result = run_cli("fleet", "gate", "--hiera", "h", "--base", "HEAD", "--no-puppetdb",
                     cwd=tmp_path)  # fmt: skip
    assert result.returncode == EXIT_NEEDS_ACTION, result.stdout + result.stderr
    why = moves.OUTAGE if stage == "parallel" else moves.CUTS_FELIX
    assert (
        result.stdout
        == f"cluster lab: moves typha.tls_stage from {stage} to none: refused: {why}\n"
    )
    # The rollbacks the rule allows pass without PuppetDB, and without a gate.
    if stage == "retire":
        _hiera(hiera / "c.yaml", {"tls_stage": "switch"})
        back = run_cli("fleet", "gate", "--hiera", "h", "--base", "HEAD", "--no-puppetdb",
                       cwd=tmp_path)  # fmt: skip
        assert back.returncode == EXIT_OK, back.stdout + back.stderr
        assert "allowed, no gate (rollback" in back.stdout


def _ca_pem(ca_dir: Path) -> tuple[str, str]:
    from typhapki.pki.pem import load_certs
    from typhapki.pki.verify import fingerprint

    path = ca_dir / "typhaca.crt"
    return path.read_text(), fingerprint(load_certs(path, "CA")[0])


def test_rotation_stage_1_rolls_back_while_no_member_holds_a_leaf_of_it(
    standin: StandIn, tmp_path: Path
) -> None:
    """docs/rotation.md's rollback of trust-new: the CA only just trusted leaves
    typha.trust; allowed while no member holds a leaf it signed."""
    from datetime import UTC, datetime

    ca = tmp_path / "ca-new"
    assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    pem, new_fp = _ca_pem(ca)
    old_fp = "a" * 64  # valid_fact's CA: the members' leaves are signed by it
    old = _hiera(tmp_path / "old.yaml", {"cfssl_label": "lab2025", "trust": [pem]})
    new = _hiera(tmp_path / "new.yaml", {"cfssl_label": "lab2025"})

    def member(leaf_issuer: str) -> StandInNode:
        fact = valid_fact(datetime.now(UTC), "lab")
        fact["trust"] = {"bundle": [old_fp, new_fp], "stage": "trust-new",
                         "leaf_issuers": {"typha": old_fp, "felix": leaf_issuer}}  # fmt: skip
        return StandInNode("lab", fact)

    standin.nodes = {f"kube100{i}.example.org": member(old_fp) for i in range(3)}
    gate: list[str | Path] = [
        "fleet",
        "gate",
        "--hiera",
        new,
        "--old",
        old,
        "--puppetdb",
        standin.url,
    ]
    allowed = run_cli(*gate)
    assert allowed.returncode == EXIT_OK, allowed.stdout + allowed.stderr
    assert "none of the 3 members holds a leaf of the CA that goes" in allowed.stdout
    standin.nodes["kube1002.example.org"] = member(new_fp)
    held = run_cli(*gate)
    assert held.returncode == EXIT_NEEDS_ACTION, held.stdout + held.stderr
    assert "kube1002.example.org: holds a leaf signed by the CA that goes" in held.stdout
    # Without PuppetDB the gate cannot know the leaves: it warns, naming the CA.
    offline = run_cli("fleet", "gate", "--hiera", new, "--old", old, "--no-puppetdb")
    assert offline.returncode == EXIT_OK and new_fp in offline.stderr


def test_docs_fleet_prints_the_rule() -> None:
    page = (ROOT / "docs" / "fleet.md").read_text()
    assert moves.markdown() in page


# The emergency CA roll (issue 41's table), written out independently of the module:
# the hiera steps in order, each forward move behind the gate of the step before it.
EMERGENCY_ORDER = ["none", "contain", "trust", "typha-leaf", "felix-leaf", "drop", "done"]
EMERGENCY_GATES = {
    ("contain", "trust"): "strict-in-force",
    ("trust", "typha-leaf"): "both-cas",
    ("typha-leaf", "felix-leaf"): "typha-roll-1",
    ("felix-leaf", "drop"): "felix-new",
    ("drop", "done"): "typha-roll-2",
    ("contain", "felix-leaf"): "from-reissue",  # a planned rotation at reissue, roll 1 done
}
EMERGENCY_STEP = st.sampled_from(EMERGENCY_ORDER)


@settings(max_examples=50)
@given(source=EMERGENCY_STEP, target=EMERGENCY_STEP)
def test_every_emergency_move_as_the_issue_says(source: str, target: str) -> None:
    move = moves.judge(moves.EMERGENCY, source, target)
    if source == target:
        assert move is None
        return
    assert move is not None
    assert move in moves.TABLE or not move.allowed  # a refusal may be made up
    a, b = EMERGENCY_ORDER.index(source), EMERGENCY_ORDER.index(target)
    finished = (source, target) == ("done", "none")
    forward = b == a + 1 or (source, target) == ("contain", "felix-leaf")
    back = b == a - 1 and b >= 1  # one step back, never to none
    assert move.allowed == (forward or back or finished), move
    assert move.gate == EMERGENCY_GATES.get((source, target)), move
    if move.allowed:
        return
    if target == "none":
        assert move.why == moves.REOPENS  # back past step 0
    elif b > a:
        assert move.why == f"it skips step {EMERGENCY_ORDER[a + 1]}"
    else:
        assert move.why.endswith(f"it skips step {EMERGENCY_ORDER[a - 1]}")


def test_the_emergency_steps_are_the_modules() -> None:
    from typhapki.pki import emergency

    assert ["none", *emergency.STEPS] == EMERGENCY_ORDER
    for gate in EMERGENCY_GATES.values():
        assert gate in moves.GATES
