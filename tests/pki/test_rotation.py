"""Staged CA rotation, proven with real mutual TLS between nodes at adjacent stages."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.support.issuing import ensure_local
from tests.support.tlspeers import HandshakeResult, node_to_node
from typhapki.errors import ConfigError, RefusedError
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.rotation import (
    Stage,
    check_stage,
    describe_rotation,
    detect_stage,
    rotate,
    rotation_stage,
)
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.verify import check_set, fingerprint
from typhapki.pki.x509compat import valid_from, valid_until
from typhapki.puppet.facts import FactRequest, gather

BOTH = [RoleName.TYPHA, RoleName.FELIX]


@pytest.fixture
def new_ca(tmp_path: Path) -> Path:
    """The CA rotated in: created later than `ca_dir`, as in real life."""
    path = tmp_path / "newca"
    init_ca(
        path,
        KeyType.ECDSA_P256,
        3650,
        None,
        force=False,
        now=datetime.now(UTC) + timedelta(minutes=1),
    )
    return path


def node(tmp_path: Path, name: str, ca_dir: Path) -> Path:
    """A node's set before the rotation: bundle and leaves by the old CA (stage 0)."""
    out = tmp_path / name
    ensure_local(out, load_issuer(ca_dir), PkiSettings(), BOTH)
    return out


def snapshot(out: Path) -> dict[str, bytes | str]:
    """Every file's bytes and every symlink's target (..data included) under `out`."""
    state: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(out):
        for name in dirs + files:
            path = Path(root) / name
            rel = str(path.relative_to(out))
            if path.is_symlink():
                state[rel] = "-> " + os.readlink(path)
            elif path.is_file():
                state[rel] = path.read_bytes()
    return state


def stage_of(out: Path, old: Path, new: Path) -> int:
    return detect_stage(
        SetPaths(out),
        load_certs(CaPaths(old).cert, "old")[0],
        load_certs(CaPaths(new).cert, "new")[0],
    )


def talk(typha_node: Path, felix_node: Path) -> HandshakeResult:
    return node_to_node(typha_node, felix_node)


def assert_nodes_talk(*nodes: Path) -> None:
    """Every node's Typha serves every node's Felix (itself included), both ways."""
    for typha_node in nodes:
        for felix_node in nodes:
            result = talk(typha_node, felix_node)
            assert result.ok, (typha_node.name, felix_node.name, result)


def to_stage(out: Path, old: Path, new: Path, stage: Stage, allow_rollback: bool = False) -> None:
    rotate(out, old, new, stage, PkiSettings(), BOTH, allow_rollback)


def test_walk_every_stage_adjacent_stages_complete_mutual_tls(
    tmp_path: Path, ca_dir: Path, new_ca: Path
) -> None:
    a, b = node(tmp_path, "a", ca_dir), node(tmp_path, "b", ca_dir)
    assert (stage_of(a, ca_dir, new_ca), stage_of(b, ca_dir, new_ca)) == (0, 0)
    assert_nodes_talk(a, b)
    for stage in (Stage.TRUST_NEW, Stage.REISSUE, Stage.DROP_OLD):
        # Node a moves first: a at stage k, b still at k-1, in both directions.
        to_stage(a, ca_dir, new_ca, stage)
        assert (stage_of(a, ca_dir, new_ca), stage_of(b, ca_dir, new_ca)) == (stage, stage - 1)
        assert_nodes_talk(a, b)
        to_stage(b, ca_dir, new_ca, stage)
        assert stage_of(b, ca_dir, new_ca) == stage
        assert_nodes_talk(a, b)
        assert check_stage(a, ca_dir, new_ca, stage, PkiSettings(), BOTH) == []

    # The stage-3 nodes trust only the new CA, and their leaves are the new CA's.
    new_fp = fingerprint(load_certs(CaPaths(new_ca).cert, "new")[0])
    assert [fingerprint(c) for c in load_certs(SetPaths(a).bundle, "bundle")] == [new_fp]


def test_two_stages_apart_do_not_talk(tmp_path: Path, ca_dir: Path, new_ca: Path) -> None:
    """The control: a stage-1 node against a stage-3 node fails both ways."""
    ahead = node(tmp_path, "ahead", ca_dir)
    for stage in (Stage.TRUST_NEW, Stage.REISSUE, Stage.DROP_OLD):
        to_stage(ahead, ca_dir, new_ca, stage)
    behind = node(tmp_path, "behind", ca_dir)
    to_stage(behind, ca_dir, new_ca, Stage.TRUST_NEW)
    # Felix at stage 1 presents an old-CA leaf Typha at stage 3 no longer trusts...
    result = talk(ahead, behind)
    assert not result.ok
    assert "certificate verify failed" in (result.server_error or ""), result
    # ...and Felix at stage 3 cannot verify Typha's old-CA leaf.
    result = talk(behind, ahead)
    assert not result.ok
    assert "certificate verify failed" in (result.client_error or ""), result


def test_every_stage_is_idempotent(tmp_path: Path, ca_dir: Path, new_ca: Path) -> None:
    out = node(tmp_path, "n", ca_dir)
    for stage in (Stage.TRUST_NEW, Stage.REISSUE, Stage.DROP_OLD):
        first = rotate(out, ca_dir, new_ca, stage, PkiSettings(), BOTH)
        assert first.changes and (first.before, first.after) == (stage - 1, stage)
        before = snapshot(out)
        again = rotate(out, ca_dir, new_ca, stage, PkiSettings(), BOTH)
        assert again.changes == [] and again.after == stage
        assert snapshot(out) == before


def test_stage_order_of_publication(tmp_path: Path, ca_dir: Path, new_ca: Path) -> None:
    """trust-new only touches the bundle; reissue only the leaves; drop-old only the bundle."""
    out = node(tmp_path, "n", ca_dir)
    expected = {
        Stage.TRUST_NEW: {"bundle"},
        Stage.REISSUE: {"typha", "felix"},
        Stage.DROP_OLD: {"bundle"},
    }
    for stage, scopes in expected.items():
        result = rotate(out, ca_dir, new_ca, stage, PkiSettings(), BOTH)
        assert {c.scope for c in result.changes} == scopes


@pytest.mark.parametrize(
    ("reached", "target", "needle"),
    [
        (Stage.NONE, Stage.REISSUE, "skips a stage"),
        (Stage.NONE, Stage.DROP_OLD, "skips a stage"),
        (Stage.TRUST_NEW, Stage.DROP_OLD, "skips a stage"),
        (Stage.DROP_OLD, Stage.TRUST_NEW, "out of order"),
        (Stage.DROP_OLD, Stage.REISSUE, "goes back"),
        (Stage.REISSUE, Stage.TRUST_NEW, "goes back"),
    ],
)
def test_skipped_or_reordered_stage_is_refused_and_nothing_changes(
    tmp_path: Path, ca_dir: Path, new_ca: Path, reached: Stage, target: Stage, needle: str
) -> None:
    out = node(tmp_path, "n", ca_dir)
    for stage in range(1, reached + 1):
        to_stage(out, ca_dir, new_ca, Stage(stage))
    before = snapshot(out)
    with pytest.raises(RefusedError, match=needle) as caught:
        rotate(out, ca_dir, new_ca, target, PkiSettings(), BOTH)
    assert str(out) in str(caught.value) and "\n" not in str(caught.value)
    assert snapshot(out) == before
    assert stage_of(out, ca_dir, new_ca) == reached


def test_rollback_one_stage_on_purpose_keeps_trust(
    tmp_path: Path, ca_dir: Path, new_ca: Path
) -> None:
    a, b = node(tmp_path, "a", ca_dir), node(tmp_path, "b", ca_dir)
    for stage in (Stage.TRUST_NEW, Stage.REISSUE):
        to_stage(a, ca_dir, new_ca, stage)
        to_stage(b, ca_dir, new_ca, stage)
    to_stage(a, ca_dir, new_ca, Stage.TRUST_NEW, allow_rollback=True)
    assert stage_of(a, ca_dir, new_ca) == Stage.TRUST_NEW
    assert_nodes_talk(a, b)
    # Two stages back stays refused, even with --allow-rollback.
    to_stage(b, ca_dir, new_ca, Stage.DROP_OLD)
    with pytest.raises(RefusedError):
        to_stage(b, ca_dir, new_ca, Stage.TRUST_NEW, allow_rollback=True)


def test_half_done_reissue_is_finished_not_undone(
    tmp_path: Path, ca_dir: Path, new_ca: Path
) -> None:
    """Typha's leaf reissued, Felix's not yet (a run killed halfway): stage 1 still."""
    out = node(tmp_path, "n", ca_dir)
    to_stage(out, ca_dir, new_ca, Stage.TRUST_NEW)
    rotate(out, ca_dir, new_ca, Stage.REISSUE, PkiSettings(), [RoleName.TYPHA])
    assert stage_of(out, ca_dir, new_ca) == Stage.TRUST_NEW
    before = snapshot(out)
    with pytest.raises(RefusedError, match="reissue under way"):
        to_stage(out, ca_dir, new_ca, Stage.TRUST_NEW)
    assert snapshot(out) == before
    with pytest.raises(RefusedError, match="skips a stage"):
        to_stage(out, ca_dir, new_ca, Stage.DROP_OLD)
    to_stage(out, ca_dir, new_ca, Stage.REISSUE)
    assert stage_of(out, ca_dir, new_ca) == Stage.REISSUE


@pytest.mark.parametrize("stage", [Stage.TRUST_NEW, Stage.REISSUE, Stage.DROP_OLD])
def test_fresh_node_joins_at_any_stage_and_talks_to_the_fleet(
    tmp_path: Path, ca_dir: Path, new_ca: Path, stage: Stage
) -> None:
    fleet = node(tmp_path, "fleet", ca_dir)
    for s in range(1, stage + 1):
        to_stage(fleet, ca_dir, new_ca, Stage(s))
    fresh = tmp_path / "fresh"
    assert stage_of(fresh, ca_dir, new_ca) == 0
    to_stage(fresh, ca_dir, new_ca, stage)
    assert stage_of(fresh, ca_dir, new_ca) == stage
    assert_nodes_talk(fleet, fresh)


def test_a_bundle_with_a_stranger_ca_fits_no_stage(
    tmp_path: Path, ca_dir: Path, new_ca: Path
) -> None:
    stranger = tmp_path / "stranger"
    init_ca(stranger, KeyType.ECDSA_P256, 3650, None, force=False)
    out = node(tmp_path, "n", stranger)
    before = snapshot(out)
    with pytest.raises(ConfigError, match="neither the old nor the new CA"):
        stage_of(out, ca_dir, new_ca)
    with pytest.raises(ConfigError, match="neither the old nor the new CA"):
        to_stage(out, ca_dir, new_ca, Stage.TRUST_NEW)
    assert snapshot(out) == before


def test_describe_rotation_needs_no_ca_dirs(tmp_path: Path, ca_dir: Path, new_ca: Path) -> None:
    out = node(tmp_path, "n", ca_dir)
    old_fp = fingerprint(load_certs(CaPaths(ca_dir).cert, "old")[0])
    new_fp = fingerprint(load_certs(CaPaths(new_ca).cert, "new")[0])
    now = datetime.now(UTC)

    def described() -> dict[str, object]:
        return describe_rotation(check_set(SetPaths(out), PkiSettings(), BOTH, now))

    info = described()
    assert (info["stage"], info["bundle_cas"], info["rotating"]) == (0, 1, False)
    assert info["leaf_issuers"] == {"typha": old_fp, "felix": old_fp}

    to_stage(out, ca_dir, new_ca, Stage.TRUST_NEW)
    info = described()
    assert (info["stage"], info["stage_name"], info["bundle_cas"]) == (1, "trust-new", 2)
    assert (info["old_ca"], info["new_ca"]) == (old_fp, new_fp)

    to_stage(out, ca_dir, new_ca, Stage.REISSUE)
    info = described()
    assert (info["stage"], info["stage_name"]) == (2, "reissue")
    assert info["leaf_issuers"] == {"typha": new_fp, "felix": new_fp}

    to_stage(out, ca_dir, new_ca, Stage.DROP_OLD)
    info = described()
    # One CA again: rotation over, which is stage 0 of the next one.
    assert (info["stage"], info["bundle_cas"], info["rotating"]) == (0, 1, False)
    assert info["bundle_fingerprints"] == [new_fp]


def test_check_stage_reports_what_is_missing(tmp_path: Path, ca_dir: Path, new_ca: Path) -> None:
    out = node(tmp_path, "n", ca_dir)
    lines = check_stage(out, ca_dir, new_ca, Stage.TRUST_NEW, PkiSettings(), BOTH)
    assert lines and "at stage none (0), not trust-new (1)" in lines[0]
    assert any("is missing from the bundle" in line for line in lines)
    to_stage(out, ca_dir, new_ca, Stage.TRUST_NEW)
    assert check_stage(out, ca_dir, new_ca, Stage.TRUST_NEW, PkiSettings(), BOTH) == []
    assert check_stage(tmp_path / "nowhere", ca_dir, new_ca, Stage.TRUST_NEW, PkiSettings(), BOTH)


# --- the stage from what signs and what is trusted, never from dates -------------------

# (signer, trusted, bundle as written, leaf issuers) -> stage, along the hiera/--trust
# flow of docs/rotation.md ("Without rotate-ca" and "Rotation in cfssl mode"): O old,
# N new. A run that has not followed the configuration yet is a state of its own.
_FLOW = [
    ("O", [], "O", "O", "none"),  # stage 0
    ("O", ["N"], "O", "O", "none"),  # trust-new configured, the run not yet done
    ("O", ["N"], "ON", "O", "trust-new"),  # stage 1
    ("N", ["O"], "ON", "O", "trust-new"),  # signer moved, leaves not yet reissued
    ("N", ["O"], "ON", "ON", "trust-new"),  # half reissued
    ("N", ["O"], "ON", "N", "reissue"),  # stage 2
    ("N", [], "ON", "N", "reissue"),  # drop-old configured, the run not yet done
    ("N", [], "N", "N", "none"),  # stage 3: over
    ("N", ["O"], "NO", "O", "trust-new"),  # bundle rewritten by the new signer first
]


@settings(max_examples=50, deadline=None)
@given(
    old=st.binary(min_size=32, max_size=32).map(bytes.hex),
    new=st.binary(min_size=32, max_size=32).map(bytes.hex),
    told=st.sampled_from(["config", "signer only", "nothing"]),
)
def test_the_stage_comes_from_signer_trust_and_bundle_not_dates(
    old: str, new: str, told: str
) -> None:
    """Two CAs are told apart by fingerprint only (same-second CAs included): the stage
    of every state of the walk, told the configuration (signer and trust list), only
    the signer (the facts.d wrapper's --ca-dir), or nothing."""
    assume(old != new)
    fp = {"O": old, "N": new}
    for signer, trusted, bundle, leaves, expected in _FLOW:
        stage, was, becomes = rotation_stage(
            [fp[c] for c in bundle],
            [fp[c] for c in leaves],
            fp[signer] if told != "nothing" else None,
            {fp[c] for c in trusted} if told == "config" else set(),
        )
        if told != "config" and (signer, bundle, leaves) == ("N", "NO", "O"):
            expected = "reissue"  # without the trust list, the written order decides
            assert (was, becomes) == (new, old)
        assert (stage.label if stage is not None else None, told) == (expected, told), (
            signer, trusted, bundle, leaves,
        )  # fmt: skip
        if expected in ("trust-new", "reissue") and told == "config":
            assert (was, becomes) == (old, new)


def _same_second_cas(tmp_path: Path) -> tuple[Path, Path]:
    """Two CAs minted in the same second with the same lifetime: nothing in their
    dates tells them apart (issue 37's batch of next year's intermediates)."""
    when = datetime.now(UTC).replace(microsecond=0)
    old, new = tmp_path / "ca-old", tmp_path / "ca-new"
    for ca in (old, new):
        init_ca(ca, KeyType.ECDSA_P256, 3650, None, force=False, now=when)
    return old, new


def _stages(out: Path, ca: Path, trust: Path | None) -> tuple[str, str, str]:
    """(the fact's trust.stage, its set.rotation.stage_name, `check`'s line) for OUT."""
    trusted: list[str | Path] = ["--trust", trust] if trust is not None else []
    facts = run_cli("facts", "--out", out, "--ca-dir", ca, *trusted, "--no-probe")
    fact = json.loads(facts.stdout)["typhapki"]
    check = run_cli("check", "--out", out, "--ca-dir", ca, *trusted)
    [line] = [ln for ln in check.stdout.splitlines() if "CA rotation" in ln] or [check.stdout]
    return fact["trust"]["stage"], fact["set"]["rotation"]["stage_name"], line.rsplit(" ", 1)[-1]


def test_same_second_cas_give_each_stage_in_the_fact_and_check(tmp_path: Path) -> None:
    """Issue 37's commands: `issue` and `facts` with --ca-dir and --trust over CAs
    minted in the same second. The fact and `check` name the stage of each step."""
    old, new = _same_second_cas(tmp_path)
    dates = {
        (valid_from(c), valid_until(c))
        for c in (load_certs(CaPaths(ca).cert, "CA")[0] for ca in (old, new))
    }
    assert len(dates) == 1
    out = tmp_path / "rot"
    steps = [
        (old, new, "trust-new"),
        (new, old, "reissue"),
    ]
    for ca, trust, expected in steps:
        issued = run_cli("issue", "--ca-dir", ca, "--trust", CaPaths(trust).cert, "--out", out)
        assert issued.returncode == 0, issued.stderr
        assert _stages(out, ca, CaPaths(trust).cert) == (expected, expected, expected)
    # drop-old configured, its run not yet done: still both CAs, leaves by the new one.
    assert _stages(out, new, None) == ("reissue", "reissue", "reissue")


def test_rotate_ca_with_same_second_cas_and_the_wrapper_naming_either(tmp_path: Path) -> None:
    """rotate-ca's stages read the same from the fact whichever CA the facts.d
    wrapper names, and as `rotate-ca --check` judges them."""
    old, new = _same_second_cas(tmp_path)
    out = node(tmp_path, "n", old)
    for stage in (Stage.TRUST_NEW, Stage.REISSUE):
        to_stage(out, old, new, stage)
        assert stage_of(out, old, new) == int(stage)
        for wrapper in (old, new):
            fact = gather(FactRequest(out=out, ca_dir=wrapper, probe=False), PkiSettings)
            assert fact["typhapki"]["trust"]["stage"] == stage.label, wrapper
