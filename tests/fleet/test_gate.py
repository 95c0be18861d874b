"""The hiera gate's reading of a change: which clusters advance to which stage."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import assert_one_line_error, require, run_cli
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
    old = _write(tmp_path / "old.yaml", {"c": {**NODES, "typha": {"cfssl_label": "a"}}})
    new = _write(tmp_path / "new.yaml", {"c": {**NODES, "typha": {"cfssl_label": "b"}}})
    result = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", new, "--old", old)
    assert result.returncode == 0, result.stderr
    assert "warning: cluster c: moves the signer from 'a' to 'b' (reissue)" in result.stderr
    same = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", new, "--old", new)
    assert same.returncode == 0 and "no cluster's CA rotation advances" in same.stdout
    # With PuppetDB asked but unreachable, the gate never passes what it could not judge.
    down = run_cli(
        "fleet", "gate", "--puppetdb", "http://127.0.0.1:9", "--hiera", new, "--old", old
    )
    assert_one_line_error(down, 8, "unreachable")


def test_cli_base_reads_the_git_revision(tmp_path: Path) -> None:
    import subprocess

    require("git")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "-C", str(tmp_path)]
    hiera = tmp_path / "data"
    hiera.mkdir()
    _write(hiera / "k8s.yaml", {"c": {**NODES, "typha": {"trust": ["old", "new"]}}})
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    _write(hiera / "k8s.yaml", {"c": {**NODES, "typha": {"trust": ["new"]}}})
    result = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", hiera, "--base", "HEAD")
    assert result.returncode == 0 and "(drop-old)" in result.stderr, result.stderr
    bad = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", hiera, "--base", "nope")
    assert_one_line_error(bad, 2, "--base")
