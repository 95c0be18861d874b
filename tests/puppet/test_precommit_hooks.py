"""The hooks of .pre-commit-hooks.yaml under real `pre-commit try-repo`.

try-repo installs typhapki from a git repository into its own environment (pip, from
PyPI). To build that environment once per session, the checkout (uncommitted changes
included) is snapshotted into one temporary repository at one commit, and every test
shares one PRE_COMMIT_HOME.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import SOURCE, require
from tests.puppet.test_lint import (  # noqa: F401 - the dnsmasq_server fixture
    CLUSTERS,
    RECORDS,
    DnsFactory,
    dnsmasq_server_fixture,
)

GIT = ["git", "-c", "user.name=typhapki tests", "-c", "user.email=tests@typhapki.invalid"]


def _pre_commit() -> str:
    """pre-commit beside this interpreter (the venv), else on the PATH."""
    beside = Path(sys.executable).parent / "pre-commit"
    if beside.exists():
        return str(beside)
    require("pre-commit")  # skips locally, fails under CI
    return str(shutil.which("pre-commit"))


def _git(cwd: Path, *args: str) -> None:
    subprocess.run([*GIT, *args], cwd=cwd, check=True, capture_output=True, timeout=120)


@dataclass
class HookRepo:
    snapshot: Path
    home: Path
    pre_commit: str
    rev: str


@pytest.fixture(scope="session")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> HookRepo:
    require("git")
    pre_commit = _pre_commit()
    base = tmp_path_factory.mktemp("pre-commit")
    snapshot = base / "typhapki"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=SOURCE,
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = SOURCE / name
        if source.is_file():  # deleted-but-tracked files are skipped
            (snapshot / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, snapshot / name)
    _git(snapshot.parent, "init", "-q", str(snapshot))
    _git(snapshot, "add", "-A")
    _git(snapshot, "commit", "-q", "-m", "snapshot of the checkout under test")
    rev = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=snapshot, check=True, capture_output=True, text=True
    ).stdout.strip()
    return HookRepo(snapshot, base / "home", pre_commit, rev)


def _hiera_repo(tmp_path: Path, files: dict[str, str]) -> Path:
    repo = tmp_path / "hieradata"
    repo.mkdir()
    _git(repo, "init", "-q")
    for name, text in files.items():
        (repo / name).write_text(text)
    _git(repo, "add", "-A")
    return repo


def _try_repo(
    hooks: HookRepo, repo: Path, hook: str, files: list[str], env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The hook as a hiera repository runs it: a .pre-commit-config.yaml naming this
    snapshot at its commit. Unlike `pre-commit try-repo`, which builds the hook's
    environment anew in a temporary store on every call (about 30 s each), the
    session's PRE_COMMIT_HOME builds it once."""
    config = repo.parent / "pre-commit-config.yaml"
    config.write_text(
        f"repos:\n- repo: {hooks.snapshot}\n  rev: {hooks.rev}\n  hooks:\n  - id: {hook}\n"
    )
    return subprocess.run(
        [hooks.pre_commit, "run", "-c", str(config), hook, "--verbose", "--files", *files],
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PRE_COMMIT_HOME": str(hooks.home), **(env or {})},
        stdin=subprocess.DEVNULL,
    )


def test_dns_hook_passes_when_every_name_resolves_and_fails_naming_the_bad_host(
    hook_repo: HookRepo, tmp_path: Path, dnsmasq_server: DnsFactory
) -> None:
    repo = _hiera_repo(tmp_path, {"kubernetes.yaml": CLUSTERS, "README.md": "not yaml\n"})
    good = dnsmasq_server(RECORDS)
    env = {"TYPHAPKI_NAMESERVERS": good.arg}
    passed = _try_repo(hook_repo, repo, "typhapki-lint-hiera", ["kubernetes.yaml"], env)
    assert passed.returncode == 0, passed.stdout + passed.stderr
    assert "Passed" in passed.stdout

    partial = dnsmasq_server({k: v for k, v in RECORDS.items() if k != "node2.example.test"})
    env = {"TYPHAPKI_NAMESERVERS": partial.arg}
    failed = _try_repo(
        hook_repo, repo, "typhapki-lint-hiera", ["kubernetes.yaml", "README.md"], env
    )
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "Failed" in failed.stdout
    assert (
        "kubernetes.yaml:10: kubernetes::clusters.main.dual.cluster_nodes[2]: "
        "node2.example.test: NXDOMAIN"
    ) in failed.stdout
    assert "README.md" not in failed.stdout.split("Failed", 1)[1]  # only YAML reaches it


def test_offline_hook_checks_validity_only(hook_repo: HookRepo, tmp_path: Path) -> None:
    bad = CLUSTERS.replace("node2.example.test", "node2.example.test;rm")
    repo = _hiera_repo(tmp_path, {"kubernetes.yaml": bad})
    # A resolver that never answers: the offline hook must not need one.
    env = {"TYPHAPKI_NAMESERVERS": "127.0.0.1:9"}
    result = _try_repo(hook_repo, repo, "typhapki-lint-hiera-offline", ["kubernetes.yaml"], env)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "kubernetes::clusters.main.dual.cluster_nodes[2]" in result.stdout
    assert "node2.example.test;rm" in result.stdout


def test_rotation_gate_hook_warns_and_passes_without_puppetdb(
    hook_repo: HookRepo, tmp_path: Path
) -> None:
    """A staged change moving a cluster's signer, a CA trusted beside it (cfssl's stage
    2, a gated move): a warning naming it, exit 0."""
    clusters = (
        "kubernetes::clusters:\n  main:\n    lab:\n      cluster_nodes: [192.0.2.1]\n"
        "      typha: {cfssl_label: LABEL, trust: [x]}\n"
    )
    repo = _hiera_repo(tmp_path, {"kubernetes.yaml": clusters.replace("LABEL", "lab")})
    _git(repo, "commit", "-q", "-m", "before")
    unchanged = _try_repo(hook_repo, repo, "typhapki-fleet-gate", ["kubernetes.yaml"])
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    assert "warning" not in unchanged.stdout
    (repo / "kubernetes.yaml").write_text(clusters.replace("LABEL", "lab2026"))
    _git(repo, "add", "-A")
    moved = _try_repo(hook_repo, repo, "typhapki-fleet-gate", ["kubernetes.yaml"])
    assert moved.returncode == 0, moved.stdout + moved.stderr
    assert "warning: cluster lab: moves the signer from 'lab' to 'lab2026'" in moved.stdout
    assert "--no-puppetdb" in moved.stdout
