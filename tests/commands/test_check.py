"""`typhapki check`: the Puppet `unless` contract (0 valid, 1 needs issue, 2 usage)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import assert_one_line_error, run_cli
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import RoleName


def test_valid_set_exits_zero(issued: Path) -> None:
    result = run_cli("check", "--out", issued)
    first, moments = result.stdout.splitlines()
    assert (result.returncode, first) == (0, f"{issued}: typha, felix set valid")
    assert moments.startswith(f"{issued}: node ") and " renews typha at 20" in moments
    quiet = run_cli("check", "--out", issued, "-q")
    assert (quiet.returncode, quiet.stdout) == (0, "")


def test_one_line_per_problem_and_exit_one(issued: Path) -> None:
    paths = SetPaths(issued)
    os.unlink(paths.key(RoleName.TYPHA))
    os.chmod(paths.key(RoleName.FELIX), 0o644)
    result = run_cli("check", "--out", issued)
    assert result.returncode == 1
    assert result.stdout.splitlines() == [
        f"{paths.key(RoleName.TYPHA)}: typha private key is missing",
        f"{paths.key(RoleName.FELIX)}: mode 0644 lets others read or write the private "
        "key: treated as exposed, typhapki issue replaces it with a new key and keeps no copy",
    ]


def test_missing_output_directory_is_exit_one_not_a_crash(tmp_path: Path) -> None:
    result = run_cli("check", "--out", tmp_path / "never-issued")
    assert result.returncode == 1
    assert len(result.stdout.splitlines()) == 5
    assert "Traceback" not in result.stderr


def test_with_ca_dir_a_foreign_ca_in_the_bundle_needs_issue(
    issued: Path, ca_dir: Path, tmp_path: Path
) -> None:
    assert run_cli("check", "--out", issued, "--ca-dir", ca_dir).returncode == 0
    other = tmp_path / "other-ca"
    assert run_cli("ca", "init", "--ca-dir", other).returncode == 0
    result = run_cli("check", "--out", issued, "--ca-dir", other)
    assert result.returncode == 1
    assert "missing from the bundle" in result.stdout
    assert "not signed by any CA in the bundle" in result.stdout
    # check never needs the CA key: a CA dir holding only the certificate is enough.
    os.unlink(ca_dir / "typhaca.key")
    assert run_cli("check", "--out", issued, "--ca-dir", ca_dir).returncode == 0


def test_check_then_issue_then_check(issued: Path, ca_dir: Path) -> None:
    """The Puppet loop: unless => check; exec => issue."""
    os.unlink(SetPaths(issued).cert(RoleName.FELIX))
    assert run_cli("check", "--out", issued).returncode == 1
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", issued).returncode == 0
    assert run_cli("check", "--out", issued).returncode == 0


def test_usage_errors_exit_two(issued: Path, tmp_path: Path) -> None:
    assert_one_line_error(run_cli("check", "--out", issued, "--key-type", "x"), 2, "key type")
    result = run_cli("check", "--out", issued, "--ca-dir", tmp_path / "nope")
    assert_one_line_error(result, 2, "nope", "CA directory does not exist")  # as `issue` says
    unknown = run_cli("check", "--bogus")
    assert unknown.returncode == 2
    assert "Traceback" not in unknown.stderr


def test_reports_the_rotation_stage_when_two_cas_are_trusted(
    issued: Path, ca_dir: Path, tmp_path: Path
) -> None:
    new = tmp_path / "new-ca"
    # Created in the same second as the old CA here: a longer life marks it the newer.
    assert run_cli("ca", "init", "--ca-dir", new, "--days", "3651").returncode == 0
    trust = ["--trust", str(new / "typhaca.crt")]
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", issued, *trust).returncode == 0
    result = run_cli("check", "--out", issued)
    assert result.returncode == 0
    assert f"{issued}: CA rotation: 2 CAs trusted, stage trust-new" in result.stdout
    assert "rotation" not in run_cli("check", "--out", issued, "-q").stdout
