"""One judge for every path that publishes: what `install` puts live, `check` accepts.

A shipped set (`install --from`) or a certificate from another PKI (`install --cert`)
is refused (exit 3, nothing published) when it carries what `check` would then refuse:
a key others could read, a CA unfit to sign in its bundle. A CA that becomes trusted
is named, with its fingerprint, in the change line.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import assert_one_line_error, run_cli
from tests.pki.test_ca_fitness import UNFIT, unfit_ca, write_set
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint


def shipped_set(tmp_path: Path, ca_dir: Path) -> Path:
    source = tmp_path / "shipped"
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", source, "--node-name", "n1")
    assert result.returncode == 0, result.stderr
    return source


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(mode=st.sampled_from([0o600, 0o400, 0o640, 0o604, 0o644, 0o660, 0o606]))
def test_a_shipped_key_others_could_read_is_never_published(
    tmp_path_factory: pytest.TempPathFactory, ca_dir: Path, mode: int
) -> None:
    root = tmp_path_factory.mktemp("ship")
    source = shipped_set(root, ca_dir)
    key = SetPaths(source).key(RoleName.FELIX)
    os.chmod(key.resolve(), mode)
    out = root / "out"
    result = run_cli("install", "--from", source, "--out", out, "--role", "felix")
    if mode & 0o077:  # the wanted mode is 0600: any group or other bit is an exposure
        assert_one_line_error(result, 3, str(key), f"{mode:04o}", "nothing installed")
        assert not SetPaths(out).key(RoleName.FELIX).exists()
        return
    assert result.returncode == 0, result.stderr
    live_key = SetPaths(out).key(RoleName.FELIX)
    assert stat.S_IMODE(live_key.stat().st_mode) == 0o600
    # What install published, check accepts: the one verdict on both sides.
    assert run_cli("check", "--out", out, "--role", "felix").returncode == 0
    assert run_cli("check", "--from", source, "--out", out, "--role", "felix").returncode == 0


@pytest.mark.parametrize("case", UNFIT)
def test_an_unfit_ca_in_a_shipped_bundle_is_refused(tmp_path: Path, case: str) -> None:
    ca, key, needle = unfit_ca(case)
    source = tmp_path / "shipped"
    write_set(source, ca, key)
    out = tmp_path / "out"
    result = run_cli("install", "--from", source, "--out", out)
    bundle = SetPaths(source).bundle
    assert_one_line_error(result, 3, str(bundle), needle, "nothing installed")
    assert not out.exists() or not SetPaths(out).bundle.exists()
    # check --from judges the shipped set exactly as install does
    assert_one_line_error(run_cli("check", "--from", source, "--out", out), 3, needle)


def test_a_ca_that_becomes_trusted_is_named_in_the_change_line(
    tmp_path: Path, ca_dir: Path
) -> None:
    source = shipped_set(tmp_path, ca_dir)
    out = tmp_path / "out"
    result = run_cli("install", "--from", source, "--out", out)
    assert result.returncode == 0, result.stderr
    ca = load_certs(SetPaths(source).bundle, "bundle")[0]
    bundle_line = next(ln for ln in result.stdout.splitlines() if ln.startswith("bundle:"))
    assert f"now trusts CA {ca.subject.rfc4514_string()} (sha256 {fingerprint(ca)})" in bundle_line
    # issue names a CA rotated in the same way
    new_ca = tmp_path / "new-ca"
    assert run_cli("ca", "init", "--ca-dir", new_ca, "--days", "3651").returncode == 0
    issued = tmp_path / "issued"
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", issued).returncode == 0
    trust = new_ca / "typhaca.crt"
    staged = run_cli("issue", "--ca-dir", ca_dir, "--out", issued, "--trust", trust)
    added = load_certs(trust, "new")[0]
    assert f"now trusts CA {added.subject.rfc4514_string()} (sha256 {fingerprint(added)})" in (
        staged.stdout
    )
