"""`typhapki rollback`: the previous generation live again, on any node without --role."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.support.issuing import ensure_local
from typhapki.pki.issuance import load_issuer
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
