"""`typhapki rotate-ca` as Puppet runs it: `--check` as `unless`, refusals as exit 3."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import CliResult, assert_one_line_error, run_cli
from tests.support.tlspeers import node_to_node
from typhapki.pki.issuance import init_ca
from typhapki.pki.settings import KeyType


@pytest.fixture
def new_ca(tmp_path: Path) -> Path:
    path = tmp_path / "newca"
    init_ca(path, KeyType.ECDSA_P256, 3650, None, force=False)
    return path


def tree(out: Path) -> dict[str, bytes | str]:
    state: dict[str, bytes | str] = {}
    for root, dirs, files in os.walk(out):
        for name in dirs + files:
            path = Path(root) / name
            if path.is_symlink():
                state[str(path)] = os.readlink(path)
            elif path.is_file():
                state[str(path)] = path.read_bytes()
    return state


def rotate(stage: str, ca_dir: Path, new_ca: Path, out: Path, *extra: str) -> CliResult:
    return run_cli(
        "rotate-ca",
        "--stage",
        stage,
        "--ca-dir",
        ca_dir,
        "--new-ca-dir",
        new_ca,
        "--out",
        out,
        *extra,
    )


def test_puppet_style_walk_with_check_as_unless(
    tmp_path: Path, ca_dir: Path, issued: Path, new_ca: Path
) -> None:
    for stage in ("trust-new", "reissue", "drop-old"):
        check = rotate(stage, ca_dir, new_ca, issued, "--check")
        assert check.returncode == 1, (stage, check.stdout, check.stderr)
        assert f"not {stage}" in check.stdout
        done = rotate(stage, ca_dir, new_ca, issued)
        assert done.returncode == 0, done.stderr
        assert f"now at stage {stage}" in done.stdout
        assert rotate(stage, ca_dir, new_ca, issued, "--check").returncode == 0
        again = rotate(stage, ca_dir, new_ca, issued, "--json")
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout)["changed"] is False
        assert node_to_node(issued, issued).ok
    # After drop-old the node is simply valid under the new CA.
    assert run_cli("check", "--out", issued, "--ca-dir", new_ca).returncode == 0


def test_skipped_stage_refused_exit_3_nothing_written(
    ca_dir: Path, issued: Path, new_ca: Path
) -> None:
    before = tree(issued)
    result = rotate("reissue", ca_dir, new_ca, issued)
    assert_one_line_error(result, 3, str(issued), "skips a stage", "trust-new")
    assert tree(issued) == before


def test_reordered_stage_refused(ca_dir: Path, issued: Path, new_ca: Path) -> None:
    for stage in ("trust-new", "reissue", "drop-old"):
        assert rotate(stage, ca_dir, new_ca, issued).returncode == 0
    before = tree(issued)
    assert_one_line_error(rotate("trust-new", ca_dir, new_ca, issued), 3, "out of order")
    assert_one_line_error(rotate("reissue", ca_dir, new_ca, issued), 3, "--allow-rollback")
    assert tree(issued) == before


def test_missing_ca_dirs_and_bad_options(
    tmp_path: Path, ca_dir: Path, issued: Path, new_ca: Path
) -> None:
    before = tree(issued)
    assert_one_line_error(
        rotate("trust-new", ca_dir, tmp_path / "nope", issued), 2, "nope", "does not exist"
    )
    (new_ca / "typhaca.crt").unlink()
    assert_one_line_error(rotate("trust-new", ca_dir, new_ca, issued), 2, "typhaca.crt", "missing")
    assert_one_line_error(rotate("trust-new", ca_dir, ca_dir, issued), 2, "same CA")
    assert_one_line_error(rotate("sideways", ca_dir, ca_dir, issued), 2, "--stage")
    assert tree(issued) == before


def test_missing_new_ca_key_for_reissue(ca_dir: Path, issued: Path, new_ca: Path) -> None:
    assert rotate("trust-new", ca_dir, new_ca, issued).returncode == 0
    (new_ca / "typhaca.key").unlink()
    before = tree(issued)
    # trust-new needs only the new CA's certificate; reissue needs its key.
    assert rotate("trust-new", ca_dir, new_ca, issued).returncode == 0
    assert_one_line_error(rotate("reissue", ca_dir, new_ca, issued), 2, "typhaca.key", "missing")
    assert tree(issued) == before


def test_check_on_a_missing_out_dir_says_so(tmp_path: Path, ca_dir: Path, new_ca: Path) -> None:
    result = rotate("trust-new", ca_dir, new_ca, tmp_path / "fresh", "--check")
    assert result.returncode == 1
    assert "does not exist" in result.stdout
    assert not (tmp_path / "fresh").exists()
