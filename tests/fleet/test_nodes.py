"""A node's state from its fact: each state reachable, hostile values only break the node."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from typhapki.fleet.nodes import (
    BROKEN,
    DNS_GATE_FAILING,
    EXPIRED,
    INVALID,
    MISSING,
    RENEWING,
    RESTART_PENDING,
    STALE,
    STATES,
    VALID,
    judge_node,
)
from typhapki.pki.settings import PkiSettings
from typhapki.puppet.facts import FactRequest, gather

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
FRESH = (NOW - HOUR).isoformat()


@pytest.fixture
def fact(issued: Path) -> dict[str, Any]:
    """A real fact of a valid set, as PuppetDB would store it (a JSON round trip)."""
    whole = gather(FactRequest(out=issued, cluster="c1", probe=False), PkiSettings)
    fact: dict[str, Any] = json.loads(json.dumps(whole["typhapki"]))
    return fact


def _state(fact: object, produced: object = FRESH) -> str:
    return judge_node("n1", fact, produced, NOW, 2 * HOUR).state


def test_every_state_is_reached_from_a_real_fact(fact: dict[str, Any]) -> None:
    seen = {
        MISSING: _state(None),
        VALID: _state(fact),
        STALE: _state(fact, (NOW - 3 * HOUR).isoformat()),
    }
    due = copy.deepcopy(fact)
    due["set"]["roles"]["felix"]["renewal_due"] = True
    due["set"]["roles"]["felix"]["valid"] = False
    due["set"]["valid"] = False
    seen[RENEWING] = _state(due)
    expired = copy.deepcopy(fact)
    expired["set"]["roles"]["typha"]["not_after"] = "2026-11-01T00:00:00Z"
    seen[EXPIRED] = _state(expired)
    invalid = copy.deepcopy(fact)
    invalid["set"]["roles"]["typha"]["valid"] = False
    invalid["set"]["valid"] = False
    seen[INVALID] = _state(invalid)
    restart = copy.deepcopy(fact)
    restart["restart"] = {"typha": {"restart_pending": True, "running": True}}
    seen[RESTART_PENDING] = _state(restart)
    gate = copy.deepcopy(fact)
    gate["ferm_gate"] = {"hosts_failed": 2, "dns_gate": "enforce"}
    seen[DNS_GATE_FAILING] = _state(gate)
    seen[BROKEN] = _state({"trust": "nope"})
    assert seen == {state: state for state in STATES}


def test_fingerprints_and_stage_come_from_the_trust_summary(fact: dict[str, Any]) -> None:
    node = judge_node("n1", fact, FRESH, NOW, 2 * HOUR)
    assert node.bundle == frozenset(fact["trust"]["bundle"])
    assert node.leaf_issuers == frozenset(fact["trust"]["leaf_issuers"].values())
    assert node.stage == "none" and node.judged
    assert node.first_expiry == min(
        datetime.fromisoformat(r["not_after"].replace("Z", "+00:00"))
        for r in fact["set"]["roles"].values()
    )


# Hostile values: anything JSON can carry (PuppetDB stores JSON), deep, huge, odd text.
_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=50)
    | st.just("\udcff\x00\x1b[2J") | st.just("x" * 100_000),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)  # fmt: skip
_PATHS = [
    (), ("trust",), ("trust", "bundle"), ("trust", "leaf_issuers"), ("trust", "stage"),
    ("set",), ("set", "roles"), ("set", "roles", "typha"), ("set", "roles", "typha", "not_after"),
    ("set", "roles", "felix", "renewal_due"), ("set", "bundle"), ("set", "valid"),
    ("restart",), ("ferm_gate",), ("error",),
]  # fmt: skip


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(where=st.sampled_from(_PATHS), value=_json, produced=st.none() | _json)
def test_hostile_values_break_only_the_node(
    fact: dict[str, Any], where: tuple[str, ...], value: object, produced: object
) -> None:
    hostile: Any = copy.deepcopy(fact)
    if where:
        parent = hostile
        for key in where[:-1]:
            parent = parent[key]
        parent[where[-1]] = value
    else:
        hostile = value
    node = judge_node("n1", hostile, produced if produced is not None else FRESH, NOW, 2 * HOUR)
    assert node.state in STATES
    assert len(node.reason) <= 200 or node.state != BROKEN
    if node.state not in (BROKEN, MISSING):
        assert all(len(fp) == 64 for fp in node.bundle | node.leaf_issuers)


def test_deeply_nested_fact_is_broken_not_a_crash() -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    assert _state({"trust": deep}) == BROKEN


def _facter_nulls(value: Any) -> Any:
    """The fact as PuppetDB holds it after Facter: every JSON null an empty string."""
    if value is None:
        return ""
    if isinstance(value, dict):
        return {k: _facter_nulls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_facter_nulls(v) for v in value]
    return value


@pytest.mark.parametrize("felix_running", [False, True])
def test_facters_empty_strings_read_as_the_nulls_they_were(
    fact: dict[str, Any], felix_running: bool
) -> None:
    """Facter stores a facts.d executable's JSON null as "" (seen against the real
    PuppetDB, tests/fleet/test_fleet_puppetdb.py): the node is judged as before."""
    fact["felix_typha"] = {"running": felix_running, "tls": None, "error": None, "tls_env": []}
    fact["typhas"] = [{"running": True, "tls": True, "port": 5474, "probe": None}]
    before = judge_node("n1", fact, FRESH, NOW, 2 * HOUR)
    after = judge_node("n1", _facter_nulls(fact), FRESH, NOW, 2 * HOUR)
    assert after.state == before.state == VALID
    assert (after.felix_tls, after.tls_typhas) == (before.felix_tls, before.tls_typhas)
