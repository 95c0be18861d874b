"""`typhapki rollback`: the previous generation live again, on any node without --role."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.issuing import ensure_local
from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.verify import fingerprint


def _reissued(
    tmp_path: Path, ca_dir: Path, roles: list[RoleName]
) -> tuple[Path, dict[RoleName, str]]:
    """A set issued twice (the second with another key type): the first is previous."""
    out = tmp_path / "out"
    ensure_local(out, load_issuer(ca_dir), PkiSettings(), roles)
    first = {r: fingerprint(load_certs(SetPaths(out).cert(r), r.value)[0]) for r in roles}
    ensure_local(out, load_issuer(ca_dir), PkiSettings(key_type=KeyType.ECDSA_P384), roles)
    return out, first


@pytest.mark.parametrize("roles", [[RoleName.FELIX], [RoleName.TYPHA, RoleName.FELIX]])
def test_rollback_without_role_rolls_back_the_sets_the_node_holds(
    tmp_path: Path, ca_dir: Path, roles: list[RoleName]
) -> None:
    out, first = _reissued(tmp_path, ca_dir, roles)
    result = run_cli("rollback", "--out", out, env={"TYPHAPKI_CONFIG": ""})
    assert result.returncode == 0, result.stderr
    for role in roles:
        assert fingerprint(load_certs(SetPaths(out).cert(role), role.value)[0]) == first[role]
    assert result.stdout.count("rolled back to") == len(roles)
    assert not SetPaths(out).role_dir(RoleName.TYPHA).exists() or RoleName.TYPHA in roles


def test_rollback_of_an_empty_directory_is_one_line(tmp_path: Path) -> None:
    result = run_cli("rollback", "--out", tmp_path, env={"TYPHAPKI_CONFIG": ""})
    assert result.returncode == 2
    assert (
        result.stderr == f"typhapki: error: {tmp_path}: holds no Typha or Felix set to roll back\n"
    )


def test_an_explicit_role_is_still_required_to_exist(tmp_path: Path, ca_dir: Path) -> None:
    out, _ = _reissued(tmp_path, ca_dir, [RoleName.FELIX])
    result = run_cli("rollback", "--out", out, "--role", "both", env={"TYPHAPKI_CONFIG": ""})
    assert result.returncode != 0 and result.stderr.startswith("typhapki: error: ")
    assert result.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("roles", "bundle"),
    [
        ([RoleName.FELIX], False),
        ([RoleName.FELIX], True),
        ([RoleName.TYPHA, RoleName.FELIX], False),
        ([RoleName.TYPHA, RoleName.FELIX], True),
    ],
)
def test_only_a_node_with_typha_is_told_and_marked_to_restart_it(
    tmp_path: Path, ca_dir: Path, roles: list[RoleName], bundle: bool
) -> None:
    """A worker runs no Typha: its rollback names no Typha restart and leaves no marker
    that no restart would ever clear. A Typha host gets both, as after `issue`."""
    out, _ = _reissued(tmp_path, ca_dir, roles)
    if bundle:  # a bundle with a previous generation: a second CA trusted, as in a rotation
        other = init_ca(tmp_path / "new-ca", KeyType.ECDSA_P256, 3650, None, force=False)
        ensure_local(
            out, load_issuer(ca_dir), PkiSettings(key_type=KeyType.ECDSA_P384), roles, [other]
        )
    marker = out / ".restart-typha"
    marker.unlink(missing_ok=True)
    args = ("--bundle",) if bundle else ()
    result = run_cli("rollback", "--out", out, *args, env={"TYPHAPKI_CONFIG": ""})
    assert result.returncode == 0, result.stderr
    holds_typha = RoleName.TYPHA in roles
    assert ("restart Typha" in result.stdout) is holds_typha, result.stdout
    assert marker.exists() is holds_typha
    if not holds_typha:
        assert "Felix reads the rolled-back files on its next reconnect" in result.stdout
