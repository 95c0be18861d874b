"""A new signer is three things: its module, its fields in the option table and one
factory line (docs/architecture.md, "Adding a signer").

The package is copied into a temporary tree, a throwaway signer is added there (a
"stub" that signs with a local CA named by its own field, `--stub-ca-dir`, or
`stub_ca_dir` in hiera) by exactly those three edits and nothing else, and the copy,
run as `python -m typhapki`, picks it up everywhere: `issue` issues a set it signs,
`check` (on the fast path and on typer's) finds that set current, its own check
refuses a bad value naming where it came from, and `lint-hiera` accepts the stub in
a cluster's `typha:` and refuses a bad value of its field, naming the key.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import SOURCE, CliResult, assert_one_line_error

# The signer's module: its typed settings, its own check of its field, and `signer()`.
STUB = '''"""A throwaway signer: the local CA, named by its own field."""

from __future__ import annotations

from pathlib import Path

from typhapki.pki.signers.local import LocalSigner
from typhapki.record import record


@record(frozen=True)
class StubConfig:
    ca_dir: Path
    kind = "stub"


def config(opts, context):
    if context.ca_dir is not None:
        opts.refuse("signer", "excludes --ca-dir: the stub holds its CA")
    if not opts.stub_ca_dir:
        opts.refuse("signer", "needs --stub-ca-dir")
    if not opts.stub_ca_dir.startswith("/"):
        opts.refuse("stub_ca_dir", "expected an absolute path")
    return StubConfig(Path(opts.stub_ca_dir))


def signer(config, settings, now):
    return LocalSigner(settings=settings, now=now, ca_dir=config.ca_dir)
'''
# The option table: the signer's field, and its name among --signer's choices.
CHOICES = ('choices=("local", "cfssl"),', 'choices=("local", "cfssl", "stub"),')
FIELD = (
    "\n\n@record(frozen=True)\nclass StateFields:",
    '    stub_ca_dir: str | None = option("The stub CA\'s directory.", hiera=True)\n'
    "\n\n@record(frozen=True)\nclass StateFields:",
)
# The factory: one line.
LINE = (
    '    "cfssl": Kind("typhapki.pki.signers.cfssl", caches_ca=True, labelled=True),\n',
    '    "cfssl": Kind("typhapki.pki.signers.cfssl", caches_ca=True, labelled=True),\n'
    '    "stub": Kind("typhapki.pki.signers.stub"),\n',
)
HIERA = """kubernetes::clusters:
  main:
    prod:
      cluster_nodes: [10.0.0.9]
      typha:
        signer: stub
        stub_ca_dir: {value}
"""


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert text.count(old) == 1, (path, old)  # the edit lands where it is meant to
    path.write_text(text.replace(old, new))


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The package copied, plus the stub signer by the three edits and nothing else."""
    root = tmp_path_factory.mktemp("tree")
    ignore = shutil.ignore_patterns("__pycache__")
    shutil.copytree(SOURCE / "typhapki", root / "typhapki", ignore=ignore)
    shutil.copytree(SOURCE / "ferm_templates", root / "ferm_templates")
    before = {p.relative_to(root) for p in root.rglob("*")}
    package = root / "typhapki"
    (package / "pki" / "signers" / "stub.py").write_text(STUB)
    edit(package / "options.py", *CHOICES)
    edit(package / "options.py", *FIELD)
    edit(package / "pki" / "signers" / "factory.py", *LINE)
    added = {p.relative_to(root) for p in root.rglob("*")} - before
    assert added == {Path("typhapki/pki/signers/stub.py")}
    return root


def run(tree: Path, *args: str | Path, fast: bool = True) -> CliResult:
    """The copy as a fresh process, as a node runs it."""
    env = {**os.environ, "PYTHONPATH": str(tree), "TYPHAPKI_CONFIG": ""}
    env["TYPHAPKI_NO_FAST_PATH"] = "" if fast else "1"
    proc = subprocess.run(
        [sys.executable, "-m", "typhapki", *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    return CliResult(proc.returncode, proc.stdout, proc.stderr)


def test_issue_and_check_pick_up_the_new_signer(tree: Path, tmp_path: Path, ca_dir: Path) -> None:
    ca, out = ca_dir, tmp_path / "out"
    stub = ("--signer", "stub", "--stub-ca-dir", ca)
    result = run(tree, "issue", "--out", out, *stub)
    assert result.returncode == 0, result
    # The set is the stub's: its CA signed the leaves (openssl, not our own reading).
    for leaf in ("typha.crt", "calico-node.crt"):
        verify = [
            "openssl",
            "verify",
            "-CAfile",
            str(ca / "typhaca.crt"),
            str(next(out.rglob(leaf))),
        ]
        assert subprocess.run(verify, capture_output=True).returncode == 0, leaf
    for fast in (True, False):
        result = run(tree, "check", "--out", out, *stub, fast=fast)
        assert result.returncode == 0, (fast, result)
        # Its own check, reached by both command lines, names the value and its flag.
        result = run(tree, "check", "--out", out, "--signer", "stub", "--stub-ca-dir", "ca")
        assert_one_line_error(result, 2, "stub_ca_dir 'ca' (from --stub-ca-dir): expected an")
    # Its field is its own: another signer refuses it (typhapki/settings/signer.py).
    result = run(tree, "check", "--out", out, "--ca-dir", ca, "--stub-ca-dir", ca)
    assert_one_line_error(result, 2, "stub_ca_dir", "needs --signer stub")


def test_lint_hiera_picks_up_the_new_signer(tree: Path, tmp_path: Path) -> None:
    hiera = tmp_path / "hiera.yaml"
    hiera.write_text(HIERA.format(value="/etc/stub-ca"))
    result = run(tree, "lint-hiera", "--offline", hiera)
    assert result.returncode == 0, result
    # A value hiera's judge refuses by the field's type, then one the stub's check refuses.
    key = "kubernetes::clusters.main.prod.typha.stub_ca_dir"
    for value, problem in (("[1]", "expected"), ("relative", "expected an absolute path")):
        hiera.write_text(HIERA.format(value=value))
        result = run(tree, "lint-hiera", "--offline", hiera)
        assert result.returncode == 1, result  # findings (docs/exit-codes.md)
        assert f"{hiera}:7: {key}" in result.stdout + result.stderr, result
        assert problem in result.stdout + result.stderr, result
