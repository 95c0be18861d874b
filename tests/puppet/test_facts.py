"""The fact's content: what `check` sees, described; never a key; never an exception."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.issuing import ensure_local
from typhapki.errors import UsageError
from typhapki.pki.issuance import load_issuer
from typhapki.pki.layout import CaPaths, SetPaths
from typhapki.pki.pem import load_certs
from typhapki.pki.settings import KeyType, PkiSettings, RoleName
from typhapki.pki.verify import fingerprint
from typhapki.pki.x509compat import valid_until
from typhapki.puppet.facts import FactRequest, file_state, gather


def _fact(request: FactRequest, settings: PkiSettings | None = None) -> dict[str, object]:
    whole = gather(request, lambda: settings or PkiSettings())
    assert set(whole) == {"typhapki"}
    json.dumps(whole)  # always serialisable
    fact = whole["typhapki"]
    assert isinstance(fact, dict)
    return fact


def test_valid_set_is_described_like_the_files_on_disk(issued: Path, ca_dir: Path) -> None:
    fact = _fact(FactRequest(out=issued, ca_dir=ca_dir))
    assert fact["ok"] is True
    assert fact["error"] is None
    the_set = fact["set"]
    assert isinstance(the_set, dict)
    assert the_set["valid"] is True and the_set["problems"] == []
    paths = SetPaths(issued)
    ca = load_certs(CaPaths(ca_dir).cert, "CA")[0]
    assert the_set["ca_sha256_fingerprint"] == fingerprint(ca)
    assert [c["sha256_fingerprint"] for c in the_set["bundle"]["cas"]] == [fingerprint(ca)]
    for role, cn, eku in (
        (RoleName.TYPHA, "calico-typha", "serverAuth"),
        (RoleName.FELIX, "calico-node", "clientAuth"),
    ):
        leaf = load_certs(paths.cert(role), "leaf")[0]
        info = the_set["roles"][role.value]
        assert info["cert_path"] == str(paths.cert(role))
        assert info["key_path"] == str(paths.key(role))
        assert info["common_name"] == cn
        assert info["eku"] == [eku]
        assert info["sha256_fingerprint"] == fingerprint(leaf)
        assert info["serial"] == format(leaf.serial_number, "x")
        assert info["issuer"] == ca.subject.rfc4514_string()
        assert info["issuer_sha256_fingerprint"] == fingerprint(ca)
        assert info["renewal_due"] is False
        assert info["not_after"] == f"{valid_until(leaf):%Y-%m-%dT%H:%M:%SZ}"
        assert info["valid"] is True


def test_never_key_material(issued: Path, ca_dir: Path) -> None:
    text = json.dumps(gather(FactRequest(out=issued, ca_dir=ca_dir), PkiSettings))
    assert "PRIVATE KEY" not in text
    for role in RoleName:
        key_pem = SetPaths(issued).key(role).read_text()
        body = "".join(key_pem.splitlines()[1:-1])
        assert body[:40] not in text


def test_renewal_due_follows_the_settings(issued: Path) -> None:
    settings = PkiSettings(renew_before=timedelta(days=400))
    fact = _fact(FactRequest(out=issued), settings)
    info = fact["set"]["roles"]["typha"]  # type: ignore[index]
    assert info["renewal_due"] is True
    assert datetime.strptime(info["renewal_due_at"], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=UTC
    ) < datetime.now(UTC)
    assert any("due for renewal" in p["message"] for p in info["problems"])
    assert fact["ok"] is False


def test_corrupt_certificate_is_a_problem_in_the_fact(issued: Path) -> None:
    cert = SetPaths(issued).cert(RoleName.TYPHA)
    cert.resolve().write_text("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
    fact = _fact(FactRequest(out=issued))
    assert fact["ok"] is False
    assert fact["error"] is None  # a broken set is a finding, not an error of the fact
    typha = fact["set"]["roles"]["typha"]  # type: ignore[index]
    assert typha["present"] is False
    assert [p["path"] for p in typha["problems"]] == [str(cert)]
    assert "corrupt" in typha["problems"][0]["message"]
    assert fact["set"]["roles"]["felix"]["valid"] is True  # type: ignore[index]


def test_missing_out_dir_reports_every_file(tmp_path: Path) -> None:
    fact = _fact(FactRequest(out=tmp_path / "nowhere"))
    assert fact["ok"] is False
    problems = fact["set"]["problems"]  # type: ignore[index]
    assert len(problems) == 5  # bundle, and cert + key of each role
    assert all("missing" in p["message"] for p in problems)


def test_bad_settings_are_an_error_and_the_set_is_still_described(issued: Path) -> None:
    def bad() -> PkiSettings:
        raise UsageError("unknown key type 'dsa'")

    fact = gather(FactRequest(out=issued), bad)
    inner = fact["typhapki"]
    assert inner["ok"] is False
    assert "unknown key type 'dsa'" in inner["error"]
    assert inner["set"]["roles"]["typha"]["common_name"] == "calico-typha"


def test_unreadable_ca_dir_is_an_error_not_an_exception(issued: Path, tmp_path: Path) -> None:
    fact = _fact(FactRequest(out=issued, ca_dir=tmp_path / "no-ca"))
    assert fact["ok"] is False
    assert "CA certificate is missing" in str(fact["error"])
    assert fact["set"]["roles"]["felix"]["present"] is True  # type: ignore[index]


def test_no_out_is_an_error() -> None:
    fact = _fact(FactRequest(out=None))
    assert fact["ok"] is False
    assert "--out is required" in str(fact["error"])
    assert "set" not in fact


def test_unexpected_exception_never_escapes(issued: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import typhapki.pki.plan

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(typhapki.pki.plan, "check_set", boom)  # Desired.judge: check's verdict
    fact = _fact(FactRequest(out=issued))
    assert fact["ok"] is False
    assert "RuntimeError: disk on fire" in str(fact["error"])


def test_ferm_rule_state(tmp_path: Path) -> None:
    rule = tmp_path / "10_typha"
    assert file_state(rule) == {"path": str(rule), "exists": False}
    rule.write_text("# rule\n")
    state = file_state(rule)
    assert state["exists"] is True
    assert state["sha256"] == hashlib.sha256(b"# rule\n").hexdigest()
    assert state["size"] == 7
    assert str(state["mtime"]).endswith("Z")


def test_ferm_state_is_in_the_fact(issued: Path, tmp_path: Path) -> None:
    rule = tmp_path / "rule"
    rule.write_text("x\n")
    fact = _fact(FactRequest(out=issued, ferm_output=rule))
    assert fact["ferm"]["exists"] is True  # type: ignore[index]
    assert fact["ok"] is True


def test_rotation_stage_is_in_the_fact(issued: Path, ca_dir: Path, tmp_path: Path) -> None:
    from typhapki.pki.issuance import init_ca, load_issuer
    from typhapki.pki.verify import load_trusted

    fact = gather(FactRequest(out=issued), PkiSettings)["typhapki"]
    assert fact["set"]["rotation"] == {"rotating": False, "stage": 0, "stage_name": "none"}
    # A newer CA trusted next to the current one: stage 1 (trust-new).
    init_ca(tmp_path / "new", KeyType.ECDSA_P256, 3651, None, force=False)
    trusted = load_trusted([tmp_path / "new" / "typhaca.crt"])
    ensure_local(
        issued, load_issuer(ca_dir), PkiSettings(), [RoleName.TYPHA, RoleName.FELIX], trusted
    )
    rotation = gather(FactRequest(out=issued), PkiSettings)["typhapki"]["set"]["rotation"]
    assert (rotation["rotating"], rotation["stage"], rotation["stage_name"]) == (
        True,
        1,
        "trust-new",
    )


def test_cluster_and_trust_summary_name_the_cas(issued: Path, ca_dir: Path, tmp_path: Path) -> None:
    """The fleet view's contract: the cluster at the top level, and the fingerprints of
    the bundle's CAs and of each leaf's issuer, as the set on disk has them."""
    from typhapki.pki.issuance import init_ca
    from typhapki.pki.verify import load_trusted

    ca = fingerprint(load_certs(CaPaths(ca_dir).cert, "CA")[0])
    plain: dict[str, Any] = _fact(FactRequest(out=issued, cluster="staging-eqiad"))
    assert plain["cluster"] == "staging-eqiad"
    assert plain["trust"] == {
        "bundle": [ca],
        "leaf_issuers": {"typha": ca, "felix": ca},
        "stage": "none",
    }
    assert _fact(FactRequest(out=issued))["cluster"] is None
    init_ca(tmp_path / "new", KeyType.ECDSA_P256, 3651, None, force=False)
    new = tmp_path / "new" / "typhaca.crt"
    ensure_local(issued, load_issuer(ca_dir), PkiSettings(), [RoleName.TYPHA], load_trusted([new]))
    trust: Any = _fact(FactRequest(out=issued, roles=[RoleName.TYPHA]))["trust"]
    assert set(trust["bundle"]) == {ca, fingerprint(load_certs(new, "CA")[0])}
    assert trust["leaf_issuers"] == {"typha": ca}
    assert trust["stage"] == "trust-new"
    assert "trust" not in _fact(FactRequest(out=None))


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    first=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=240)),
    second=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=240)),
)
def test_fact_does_not_change_while_the_node_does_not(
    issued: Path, ca_dir: Path, first: timedelta, second: timedelta
) -> None:
    """No churn in PuppetDB: timestamps, not countdowns, and no generation time."""
    request = FactRequest(out=issued, ca_dir=ca_dir, probe=False)
    now = datetime.now(UTC)
    a = gather(request, PkiSettings, now + first)
    b = gather(request, PkiSettings, now + second)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert "generated_at" not in a["typhapki"]
    assert "days_left" not in json.dumps(a)


def test_fact_changes_when_the_node_does(issued: Path, ca_dir: Path) -> None:
    request = FactRequest(out=issued, ca_dir=ca_dir, probe=False)
    before = gather(request, PkiSettings)
    ensure_local(
        issued, load_issuer(ca_dir), PkiSettings(key_type=KeyType.ECDSA_P384), [RoleName.TYPHA]
    )
    after = gather(request, PkiSettings)
    assert before != after
    assert (
        after["typhapki"]["restart"]["typha"]["generation"]
        != (before["typhapki"]["restart"]["typha"]["generation"])
    )
