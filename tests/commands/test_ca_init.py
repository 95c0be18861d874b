"""`typhapki ca init`: creates, refuses to overwrite, --force keeps the old CA for rollback."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from tests.conftest import assert_one_line_error, run_cli
from typhapki.pki.pem import load_certs


def test_creates_ca_with_private_key_file(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    result = run_cli("ca", "init", "--ca-dir", ca, "--cn", "staging-eqiad typha CA")
    assert result.returncode == 0, result.stderr
    assert "created CA CN=staging-eqiad typha CA" in result.stdout
    assert stat.S_IMODE(os.stat(ca / "typhaca.key").st_mode) == 0o600
    assert load_certs(ca / "typhaca.crt", "ca")[0].subject.rfc4514_string() == (
        "CN=staging-eqiad typha CA"
    )
    assert "PRIVATE KEY" not in result.stdout + result.stderr


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    before = (ca / "typhaca.crt").read_bytes()
    result = run_cli("ca", "init", "--ca-dir", ca)
    assert_one_line_error(result, 3, "typhaca.crt", "already exists", "--force")
    assert (ca / "typhaca.crt").read_bytes() == before


def test_force_replaces_and_keeps_the_previous_ca(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    before = (ca / "typhaca.crt").read_bytes()
    assert run_cli("ca", "init", "--ca-dir", ca, "--force").returncode == 0
    assert (ca / "typhaca.crt").read_bytes() != before
    assert (ca / "..previous" / "typhaca.crt").read_bytes() == before


def test_bad_inputs_are_one_line_and_write_nothing(tmp_path: Path) -> None:
    ca = tmp_path / "ca"
    assert_one_line_error(
        run_cli("ca", "init", "--ca-dir", ca, "--key-type", "dsa-1024"), 2, "unknown key type"
    )
    assert_one_line_error(run_cli("ca", "init", "--ca-dir", ca, "--cn", ""), 2, "must not be empty")
    assert_one_line_error(run_cli("ca", "init", "--ca-dir", ca, "--cn", "x" * 65), 2, "at most 64")
    assert_one_line_error(run_cli("ca", "init", "--ca-dir", ca, "--days", "0"), 2, "at least 1")
    assert not ca.exists()
    (tmp_path / "file").write_text("not a dir")
    assert_one_line_error(run_cli("ca", "init", "--ca-dir", tmp_path / "file" / "ca"), 4, "file")
