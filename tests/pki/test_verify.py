"""Every reason `check` gives for a set that needs `issue`, one test each."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typhapki.pki.issuance import init_ca, load_issuer
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import Identity, KeyFileOwnership, KeyType, PkiSettings, RoleName
from typhapki.pki.verify import Fix, SetReport, check_set

BOTH = [RoleName.TYPHA, RoleName.FELIX]


def run_check(out: Path, settings: PkiSettings | None = None, **kw: object) -> SetReport:
    now = kw.pop("now", datetime.now(UTC))
    assert isinstance(now, datetime)
    return check_set(SetPaths(out), settings or PkiSettings(), BOTH, now, **kw)  # type: ignore[arg-type]


def messages(report: SetReport) -> list[str]:
    return [p.line() for p in report.problems]


def test_fresh_set_is_valid(issued: Path) -> None:
    report = run_check(issued)
    assert report.ok, messages(report)
    assert report.roles[RoleName.TYPHA].issuer is not None


def test_missing_everything_names_each_file(tmp_path: Path) -> None:
    report = run_check(tmp_path / "nothing")
    lines = messages(report)
    assert len(lines) == 5
    assert any("calico-typha-ca/typhaca.crt: CA bundle is missing" in ln for ln in lines)
    assert any("typha.key: typha private key is missing" in ln for ln in lines)
    assert any("calico-node.crt: felix certificate is missing" in ln for ln in lines)


def test_key_that_does_not_match_its_certificate(issued: Path) -> None:
    paths = SetPaths(issued)
    gen = paths.role_dir(RoleName.TYPHA) / os.readlink(paths.role_dir(RoleName.TYPHA) / "..data")
    os.unlink(gen / "typha.key")
    shutil.copy(paths.key(RoleName.FELIX), gen / "typha.key")
    report = run_check(issued)
    assert [p.message for p in report.roles[RoleName.TYPHA].problems] == [
        "private key does not match typha.crt"
    ]
    assert report.roles[RoleName.FELIX].problems == []


def test_felix_certificate_in_typhas_place_has_wrong_eku_and_cn(issued: Path) -> None:
    paths = SetPaths(issued)
    typha_dir = paths.role_dir(RoleName.TYPHA)
    for name in ("typha.crt", "typha.key"):
        os.unlink(typha_dir / name)
    shutil.copy(paths.cert(RoleName.FELIX), typha_dir / "typha.crt")
    shutil.copy(paths.key(RoleName.FELIX), typha_dir / "typha.key")
    msgs = [p.message for p in run_check(issued).roles[RoleName.TYPHA].problems]
    assert "EKU is clientAuth; a typha certificate must carry exactly serverAuth" in msgs
    assert "CN is 'calico-node', typha identity must be 'calico-typha'" in msgs


def test_identity_mismatch_after_a_config_change(issued: Path) -> None:
    settings = PkiSettings(felix=Identity("felix-prod", "spiffe://prod/felix"))
    msgs = [p.message for p in run_check(issued, settings).roles[RoleName.FELIX].problems]
    assert msgs[0] == "CN is 'calico-node', felix identity must be 'felix-prod'"
    assert "URI SAN 'spiffe://prod/felix' missing" in msgs[1]


def test_key_type_drift(issued: Path) -> None:
    report = run_check(issued, PkiSettings(key_type=KeyType.RSA_2048))
    msgs = [p.message for p in report.roles[RoleName.TYPHA].problems]
    assert msgs == ["key type is ecdsa-p256, want rsa-2048"]


def test_leaf_not_signed_by_a_bundle_ca(issued: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-ca"
    init_ca(other, KeyType.ECDSA_P256, 100, "other", force=False)
    report = run_check(issued, wanted_bundle=[load_issuer(other).cert])
    assert any("missing from the bundle" in m for m in messages(report))
    assert any("is in the bundle but not configured" in m for m in messages(report))
    for role in BOTH:
        assert [p.message for p in report.roles[role].problems] == [
            "not signed by any CA in the bundle"
        ]


def test_signed_by_a_bundle_ca_that_is_not_the_current_one(issued: Path, tmp_path: Path) -> None:
    old = load_issuer(tmp_path / "ca").cert
    new_dir = tmp_path / "new-ca"
    new = init_ca(new_dir, KeyType.ECDSA_P256, 100, "new", force=False)
    report = run_check(issued, wanted_bundle=[new, old], signing_ca=new)
    assert "not by the current CA CN=new" in report.roles[RoleName.FELIX].problems[0].message


def test_renewal_window_and_expiry(issued: Path) -> None:
    now = datetime.now(UTC)
    assert run_check(issued, now=now + timedelta(days=200)).ok  # before 2/3 of 365 days
    due = run_check(issued, now=now + timedelta(days=250))
    assert all("due for renewal since" in p.message for p in due.problems)
    assert {p.scope for p in due.problems} == {"typha", "felix"}
    expired = run_check(issued, now=now + timedelta(days=400))
    assert all("expired at" in p.message for p in expired.problems)


def test_explicit_renew_before(issued: Path) -> None:
    now = datetime.now(UTC)
    settings = PkiSettings(renew_before=timedelta(days=30))
    assert run_check(issued, settings, now=now + timedelta(days=330)).ok
    assert not run_check(issued, settings, now=now + timedelta(days=340)).ok


def test_not_yet_valid_is_reported(issued: Path) -> None:
    report = run_check(issued, now=datetime.now(UTC) - timedelta(hours=1))
    assert all("not valid until" in p.message for p in report.problems if p.scope != "bundle")


def test_wrong_key_mode_is_a_permissions_fix(issued: Path) -> None:
    os.chmod(SetPaths(issued).key(RoleName.FELIX), 0o400)  # tighter: nobody else read it
    problems = run_check(issued).roles[RoleName.FELIX].problems
    assert [(p.fix, p.message) for p in problems] == [(Fix.PERMISSIONS, "mode 0400, want 0600")]
    os.chmod(SetPaths(issued).key(RoleName.FELIX), 0o640)
    settings = PkiSettings(key_files=KeyFileOwnership(uid=4242, mode=0o640))
    problems = run_check(issued, settings).roles[RoleName.FELIX].problems
    assert [p.message for p in problems] == [f"owner uid {os.getuid()}, want 4242"]


def test_corrupt_certificate_file(issued: Path) -> None:
    paths = SetPaths(issued)
    d = paths.role_dir(RoleName.FELIX)
    gen = d / os.readlink(d / "..data")
    body = (gen / "calico-node.crt").read_bytes()
    os.unlink(gen / "calico-node.crt")
    (gen / "calico-node.crt").write_bytes(body[:40] + b"garbage" + body[60:])
    msgs = [p.line() for p in run_check(issued).roles[RoleName.FELIX].problems]
    assert msgs == [f"{paths.cert(RoleName.FELIX)}: corrupt PEM certificate"]


def test_visible_link_missing_is_reported_even_when_generation_is_fine(issued: Path) -> None:
    paths = SetPaths(issued)
    os.unlink(paths.cert(RoleName.TYPHA))
    msgs = [p.line() for p in run_check(issued).roles[RoleName.TYPHA].problems]
    assert msgs == [f"{paths.cert(RoleName.TYPHA)}: typha certificate is missing"]
