"""`typhapki facts`, `metrics` and `check --nagios` on a node of each Calico release's
process shapes (typhapki/calico.py), with processes of three owners and a hostile
Typha, in the run's private PID namespace (scripts/test.sh)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require_root, run_cli
from tests.support.gopeers import felix_env, typha_env
from tests.support.issuing import ensure_local
from tests.support.processes import (
    OTHER_UID,
    ROOT,
    SHAPED,
    TYPHA_UID,
    Node,
)
from typhapki.calico import Release
from typhapki.pki.issuance import load_issuer
from typhapki.pki.settings import KeyType, PkiSettings, RoleName

HOSTILE_PORTS = ["5\u00b2", "9" * 5000]


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch) -> Iterator[Node]:
    require_root()
    found = Node(monkeypatch)
    yield found
    found.close()


def _fact(out: Path, *more: str) -> dict[str, Any]:
    """`typhapki facts` as Facter runs it (no probe: no Typha listens here)."""
    result = run_cli("facts", "--out", out, "--no-probe", *more)
    assert result.returncode == 0, result.stderr
    fact: dict[str, Any] = json.loads(result.stdout)["typhapki"]
    return fact


@pytest.mark.parametrize("hostile", HOSTILE_PORTS, ids=["superscript", "5000-digits"])
@pytest.mark.parametrize("release", SHAPED)
def test_the_fact_sees_typha_and_felix_of_each_shape_and_owner(
    release: Release, hostile: str, issued: Path, ca_dir: Path, node: Node
) -> None:
    """Typha (owned by the Typha uid) and Felix (root) are seen; another user's Typha
    and a Typha-uid Felix are listed as ignored; a hostile Typha is one row that says
    why. Restart drift then works through a reissue and a restart."""
    typha = node.start(release.typha.argv, typha_env(issued), TYPHA_UID)
    felix = node.start(release.felix.argv, felix_env(issued), ROOT)
    stranger = node.start(release.typha.argv, typha_env(issued), OTHER_UID)
    false_felix = node.start(release.felix.argv, felix_env(issued), TYPHA_UID)
    bad = node.start(release.typha.argv, {"TYPHA_SERVERPORT": hostile}, ROOT)

    fact = _fact(issued)
    assert fact["error"] is None and fact["ok"] is True, fact["error"]
    assert fact["restart"]["typha"]["running"] and fact["restart"]["felix"]["running"]
    assert fact["felix_typha"]["tls"] is True and fact["felix_typha"]["pid"] == felix
    rows = {row["pid"]: row for row in fact["typhas"]}
    assert set(rows) == {typha, bad}
    assert rows[typha]["tls"] is True and rows[typha]["error"] is None
    assert rows[bad]["tls"] is None and "TYPHA_SERVERPORT" in rows[bad]["error"]
    assert len(rows[bad]["error"]) < 200
    ignored = {(i["pid"], i["component"], i["uid"]) for i in fact["ignored_processes"]}
    assert ignored == {(stranger, "typha", OTHER_UID), (false_felix, "felix", TYPHA_UID)}

    # check --nagios and metrics: the hostile Typha does not void their verdict either.
    nagios = run_cli("check", "--nagios", "--out", issued, "--no-probe")
    assert nagios.returncode == 0, nagios.stdout
    assert "ValueError" not in nagios.stdout and f"ignored process {stranger}" in nagios.stdout
    metrics = run_cli("metrics", "--out", issued, "--no-probe")
    assert metrics.returncode == 0 and "collect_error" not in metrics.stderr, metrics.stderr
    assert 'typhapki_component_running{cluster="",component="typha"} 1.0' in metrics.stdout
    assert (
        'typhapki_component_ignored_processes{cluster="",component="felix"} 1.0' in metrics.stdout
    )
    # --typha-uid names another user: that user's Typha counts, the Typha uid's is ignored.
    other = _fact(issued, "--typha-uid", str(OTHER_UID))
    assert {i["pid"] for i in other["ignored_processes"]} == {typha, false_felix}

    # A reissue (the hostile Typha rolled away first): pending until Typha restarts.
    node.stop(bad)
    time.sleep(0.05)
    changes = ensure_local(
        issued, load_issuer(ca_dir), PkiSettings(key_type=KeyType.ECDSA_P384), [RoleName.TYPHA]
    )
    assert [c.action for c in changes] == ["reissued"]
    assert _fact(issued)["restart"]["typha"]["restart_pending"] is True
    time.sleep(0.05)
    node.start(release.typha.argv, typha_env(issued), TYPHA_UID)
    node.stop(typha)
    after = _fact(issued)["restart"]
    assert after["typha"]["running"] and after["typha"]["restart_pending"] is False
    assert after["felix"]["restart_pending"] is False


def test_a_bad_typha_uid_is_said_in_the_fact(issued: Path, node: Node) -> None:
    """--typha-uid is read as plain digits (typhapki/numbers.py); the fact names it."""
    for value in ("0", "10001x", "\u0661\u0660\u0660\u0660\u0661", "9" * 50):
        fact = _fact(issued, "--typha-uid", value)
        assert "--typha-uid" in fact["error"], (value, fact["error"])
    bad = run_cli("check", "--nagios", "--out", issued, "--no-probe", "--typha-uid", "0")
    assert bad.returncode == 3 and "--typha-uid" in bad.stdout, bad.stdout
