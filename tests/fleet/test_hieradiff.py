"""The hiera change `fleet gate` judges (typhapki/fleet/hieradiff.py): the tree before
it from a git revision (`--base`) or a path (`--old`), and every entry of either tree
the gate cannot read as hiera refused in a line of its own, never skipped. Through the
command, against a real git repository."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, require, run_cli
from tests.fleet.test_gate import NODES, _write
from typhapki.fleet.gate import git_quotes


def test_cli_base_reads_the_git_revision(tmp_path: Path) -> None:
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
