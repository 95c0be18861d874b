"""`typhapki inspect`: what an operator reads, human and --json."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import assert_one_line_error, run_cli
from typhapki.pki.layout import SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import RoleName
from typhapki.pki.verify import fingerprint


def test_json_fields(issued: Path) -> None:
    paths = SetPaths(issued)
    cert_path = paths.cert(RoleName.FELIX)
    result = run_cli("inspect", "--json", cert_path, paths.bundle)
    assert result.returncode == 0, result.stderr
    doc = json.loads(result.stdout)
    info = doc[str(cert_path)][0]
    cert = load_certs(cert_path, "c")[0]
    assert info["common_name"] == "calico-node"
    assert info["eku"] == ["clientAuth"]
    assert info["sha256_fingerprint"] == fingerprint(cert)
    assert info["serial"] == format(cert.serial_number, "x")
    assert 364 < info["days_left"] <= 365
    assert info["issuer"].startswith("CN=typhapki-ca-")
    assert doc[str(paths.bundle)][0]["is_ca"] is True


def test_text_output(issued: Path) -> None:
    result = run_cli("inspect", SetPaths(issued).cert(RoleName.TYPHA))
    assert result.returncode == 0
    assert "subject:     CN=calico-typha" in result.stdout
    assert "EKU:         serverAuth" in result.stdout
    assert "days left:   365.0" in result.stdout


def test_never_prints_keys_and_rejects_them(issued: Path) -> None:
    key = SetPaths(issued).key(RoleName.TYPHA)
    result = run_cli("inspect", key)
    assert_one_line_error(result, 2, str(key), "no PEM certificate found")
    assert "PRIVATE" not in result.stdout + result.stderr


def test_missing_file(tmp_path: Path) -> None:
    assert_one_line_error(run_cli("inspect", tmp_path / "x.crt"), 2, "x.crt", "missing")
