"""The hiera gate's reading of a change: which clusters advance to which stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import assert_one_line_error, run_cli
from typhapki.fleet.gate import advances, rotation_keys


def _write(path: Path, clusters: dict[str, Any], defaults: dict[str, Any] | None = None) -> Path:
    data: dict[str, Any] = {"kubernetes::clusters": {"main": clusters}}
    if defaults is not None:
        data["kubernetes::clusters_defaults"] = defaults
    path.write_text(yaml.safe_dump(data))
    return path


def _moves(
    tmp_path: Path, old: dict[str, Any], new: dict[str, Any], **kw: Any
) -> set[tuple[str, str]]:
    before = rotation_keys(_write(tmp_path / "old.yaml", old, kw.get("old_defaults")))
    after = rotation_keys(_write(tmp_path / "new.yaml", new, kw.get("new_defaults")))
    return {(a.cluster, a.stage) for a in advances(before, after)}


NODES = {"cluster_nodes": ["192.0.2.1"]}


@pytest.mark.parametrize(
    "old, new, moves",
    [
        ({}, {"trust": ["ca-2026"]}, {("c", "trust-new")}),
        ({"trust": ["ca-2026"]}, {}, {("c", "drop-old")}),
        ({"cfssl_label": "lab"}, {"cfssl_label": "lab2026"}, {("c", "reissue")}),
        # docs/rotation.md's cfssl stage 2: the label moves, the old CA is trusted instead
        (
            {"cfssl_label": "lab", "trust": ["new"]},
            {"cfssl_label": "lab2026", "trust": ["old"]},
            {("c", "reissue")},
        ),
        # a label move that drops the old CA outright is two moves, never passable at once
        (
            {"cfssl_label": "lab", "trust": ["old"]},
            {"cfssl_label": "lab2026"},
            {("c", "reissue"), ("c", "drop-old")},
        ),
        # trusting the new CA and signing with it in one change skips trust-new: one
        # refused move (tests/fleet/test_moves.py)
        ({"cfssl_label": "lab"}, {"cfssl_label": "lab2026", "trust": ["x"]}, {("c", "reissue")}),
        ({"cfssl_label": "lab", "trust": ["x"]}, {"cfssl_label": "lab", "trust": ["x"]}, set()),
        ({"typha_cn": "a"}, {"typha_cn": "b"}, set()),
    ],
)
def test_typha_changes(
    tmp_path: Path, old: dict[str, Any], new: dict[str, Any], moves: set[tuple[str, str]]
) -> None:
    assert _moves(tmp_path, {"c": {**NODES, "typha": old}}, {"c": {**NODES, "typha": new}}) == moves


def test_intermediate_base_is_the_signer_unless_typha_names_a_label(tmp_path: Path) -> None:
    old = {
        "c": {**NODES, "pki_intermediate_base": "discovery"},
        "d": {**NODES, "pki_intermediate_base": "x", "typha": {"cfssl_label": "lab"}},
    }
    new = {
        "c": {**NODES, "pki_intermediate_base": "discovery2026"},
        "d": {**NODES, "pki_intermediate_base": "y", "typha": {"cfssl_label": "lab"}},
    }
    assert _moves(tmp_path, old, new) == {("c", "reissue")}


def test_defaults_reach_every_cluster_and_new_clusters_start_anywhere(tmp_path: Path) -> None:
    clusters = {"a": NODES, "b": NODES}
    moves = _moves(
        tmp_path, clusters, {**clusters, "new": NODES},
        old_defaults={"typha": {"trust": ["x"]}}, new_defaults={"typha": {"trust": []}},
    )  # fmt: skip
    assert moves == {("a", "drop-old"), ("b", "drop-old")}


def test_cli_without_puppetdb_warns_and_passes(tmp_path: Path) -> None:
    old = _write(
        tmp_path / "old.yaml", {"c": {**NODES, "typha": {"cfssl_label": "a", "trust": ["new"]}}}
    )
    new = _write(
        tmp_path / "new.yaml", {"c": {**NODES, "typha": {"cfssl_label": "b", "trust": ["old"]}}}
    )
    result = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", new, "--old", old)
    assert result.returncode == 0, result.stderr
    assert "warning: cluster c: moves the signer from 'a' to 'b' and swaps" in result.stderr
    same = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", new, "--old", new)
    assert (
        same.returncode == 0 and "no cluster's CA rotation or live switch advances" in same.stdout
    )
    # With PuppetDB asked but unreachable, the gate never passes what it could not judge.
    down = run_cli(
        "fleet", "gate", "--puppetdb", "http://127.0.0.1:9", "--hiera", new, "--old", old
    )
    assert_one_line_error(down, 8, "unreachable")
