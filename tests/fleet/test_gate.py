"""The hiera gate's reading of a change: which clusters advance to which stage."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, require, run_cli
from typhapki.fleet.gate import advances, git_quotes, rotation_keys


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


# --- what the gate cannot judge: a refusal line each, never a skip ----------------------

_GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@t.invalid", "-c", "core.symlinks=true"]
# Names git prints quoted (core.quotePath): control characters, quotes, backslashes,
# anything beyond ASCII. A file system takes any of them but "/" and NUL.
_quoted_names = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="/\x00"), min_size=1, max_size=8
).filter(lambda s: git_quotes(os.fsencode(s)) and s not in (".", ".."))


def _repo(tmp_path: Path) -> tuple[Path, list[str]]:
    """A hiera repository with one commit: a valid k8s.yaml; the git command for it."""
    require("git")
    repo = tmp_path / "repo"
    repo.mkdir()
    git = [*_GIT, "-C", str(repo)]
    subprocess.run([*git, "init", "-q"], check=True)
    _write(repo / "k8s.yaml", {"c": {**NODES, "typha": {"trust": ["old"]}}})
    return repo, git


def _commit(git: list[str]) -> None:
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)


def _gate(repo: Path, *args: str | Path) -> Any:
    result = run_cli("fleet", "gate", "--no-puppetdb", "--hiera", repo, *args)
    assert "Traceback" not in result.stdout + result.stderr
    return result


@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(name=_quoted_names, suffix=st.sampled_from([".yaml", ".yml", ".txt", ""]))
def test_a_name_git_quotes_is_refused_in_the_base(tmp_path: Path, name: str, suffix: str) -> None:
    shutil.rmtree(tmp_path / "repo", ignore_errors=True)
    repo, git = _repo(tmp_path)
    hostile = repo / (name + suffix)
    _write(hostile, {"kubernetes::clusters_defaults": {"typha": {"trust": ["x"]}}})
    _commit(git)
    hostile.unlink()  # gone from the working tree: only the base holds it
    result = _gate(repo, "--base", "HEAD")
    assert result.returncode == 1, (result.stdout, result.stderr)
    [line] = result.stdout.splitlines()
    assert "refused: a file name git quotes" in line and line.isprintable(), line


@pytest.mark.parametrize("kind", ["submodule", "symlink"])
def test_submodules_and_symlinks_in_the_base_are_refused(tmp_path: Path, kind: str) -> None:
    repo, git = _repo(tmp_path)
    if kind == "submodule":
        # A gitlink as `git submodule add` leaves it (not checked out here).
        subprocess.run([*git, "add", "k8s.yaml"], check=True)
        subprocess.run([*git, "update-index", "--add", "--cacheinfo",
                        f"160000,{'1' * 40},hieradata"], check=True)  # fmt: skip
        subprocess.run([*git, "commit", "-qm", "x"], check=True)
    else:
        (repo / "link.yaml").symlink_to("k8s.yaml")
        _commit(git)
        (repo / "link.yaml").unlink()
    result = _gate(repo, "--base", "HEAD")
    assert result.returncode == 1, (result.stdout, result.stderr)
    why = {
        "submodule": "hieradata: refused: a submodule",
        "symlink": "link.yaml: refused: a symlink",
    }
    [line] = result.stdout.splitlines()
    assert why[kind] in line, line


@pytest.mark.parametrize("kind", ["fifo", "socket", "symlink", "repository", "quoted"])
def test_what_the_working_tree_holds_that_the_gate_cannot_read(tmp_path: Path, kind: str) -> None:
    """The new side: a FIFO (named like hiera: never opened, never a hang), a socket, a
    symlink, another repository inside, a name git quotes; each one line, exit 1, with
    --base and with --old alike."""
    repo, git = _repo(tmp_path)
    _commit(git)
    old = _write(tmp_path / "old.yaml", {"c": {**NODES, "typha": {"trust": ["old"]}}})
    entry = repo / {"quoted": "caf\u00e9.yaml"}.get(kind, f"{kind}.yaml")
    if kind == "fifo":
        os.mkfifo(entry)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(entry))  # the socket file stays after the close
    elif kind == "symlink":
        entry.symlink_to(repo / "k8s.yaml")
    elif kind == "repository":
        entry = repo / "vendored"
        (entry / ".git").mkdir(parents=True)
    else:
        entry.write_text("{}\n")
    for args in (["--base", "HEAD"], ["--old", old]):
        result = _gate(repo, *args)
        assert result.returncode == 1, (kind, result.stdout, result.stderr)
        [line] = result.stdout.splitlines()
        assert line.startswith(f"{entry}: refused"), line  # printable: shown as it is
        if kind != "quoted":
            assert "caf" not in line
    # The hook's own layout: the repository's .git is not hiera, and what git ignores
    # (a developer's virtualenv, full of symlinks) is no part of the change.
    if entry.is_dir() and not entry.is_symlink():
        shutil.rmtree(entry)
    else:
        entry.unlink()
    (repo / ".venv" / "bin").mkdir(parents=True)
    (repo / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")
    (repo / ".gitignore").write_text(".venv/\n")
    _commit(git)
    passed = _gate(repo, "--base", "HEAD")
    assert passed.returncode == 0 and "refused" not in passed.stdout, passed
