"""A node's state from its fact: each state reachable, hostile values only break the node."""

from __future__ import annotations

import copy
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.puppetdb import as_puppet_sends
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
    BrokenFact,
    judge_node,
    read_fact,
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


@pytest.mark.parametrize("felix_running", [False, True])
def test_facters_empty_strings_read_as_the_nulls_they_were(
    fact: dict[str, Any], felix_running: bool
) -> None:
    """Facter stores a facts.d executable's JSON null as "" (seen against the real
    PuppetDB, tests/fleet/test_fleet_puppetdb.py): the node is judged as before."""
    fact["felix_typha"] = {"running": felix_running, "tls": None, "error": None, "tls_env": []}
    fact["typhas"] = [{"running": True, "tls": True, "port": 5474, "probe": None}]
    before = judge_node("n1", fact, FRESH, NOW, 2 * HOUR)
    after = judge_node("n1", as_puppet_sends(fact), FRESH, NOW, 2 * HOUR)
    assert after.state == before.state == VALID
    assert (after.felix_tls, after.tls_typhas) == (before.felix_tls, before.tls_typhas)


def _paths(value: Any, where: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a fact: each key of each mapping, each item of each list."""
    found = [where] if where else []
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*where, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += _paths(item, (*where, i))
    return found


def _set(fact: Any, where: tuple[Any, ...], value: object) -> Any:
    """A copy of FACT with VALUE at WHERE (unchanged when an earlier change removed it)."""
    changed = copy.deepcopy(fact)
    parent = changed
    for key in where[:-1]:
        if not isinstance(parent, dict | list):
            return changed
        parent = parent[key]
    if isinstance(parent, dict | list):
        parent[where[-1]] = value
    return changed


@pytest.fixture
def switch_fact(fact: dict[str, Any]) -> dict[str, Any]:
    """A real fact with the live switch's evidence, nulls included (as the fact of a
    node with a TLS Typha not probed and Felix's transport unknown)."""
    fact["felix_typha"] = {"running": True, "tls": None, "error": None, "tls_env": []}
    fact["typhas"] = [
        {"running": True, "tls": True, "port": 5474, "probe": None},
        {"running": True, "tls": True, "port": 5475,
         "probe": {"accepted": True, "error": None, "policy": None}},
    ]  # fmt: skip
    fact["ferm_gate"] = {"hosts_failed": 0, "dns_gate": "enforce", "last_success": None}
    return fact


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_facters_empty_string_reads_as_null_at_every_place(
    switch_fact: dict[str, Any], data: st.DataObject
) -> None:
    """Any place of the fact null, as typhapki writes it, and the same fact as Puppet
    sends it after Facter (every null ""): one verdict, field for field."""
    places = data.draw(st.lists(st.sampled_from(_paths(switch_fact)), max_size=3))
    fact = switch_fact
    for where in places:
        fact = _set(fact, where, None)
    raw = judge_node("n1", fact, FRESH, NOW, 2 * HOUR)
    assert judge_node("n1", as_puppet_sends(fact), FRESH, NOW, 2 * HOUR) == raw
    assert read_fact(as_puppet_sends(fact)) == read_fact(fact)


# Hostile values where the fact holds anything: "" where a mapping or list is expected
# (Facter's null), wrong types, huge text and lists, deep nesting.
_hostile = (
    _json | st.just("") | st.just([""] * 10_000) | st.just({"x": "y" * 1_000_000})
    | st.integers(min_value=2**63) | st.just(["a" * 64] * 17)
)  # fmt: skip


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_a_hostile_value_anywhere_is_one_fact_broken_line(
    switch_fact: dict[str, Any], data: st.DataObject
) -> None:
    """Through the conversion, a hostile value at any place of a real fact leaves the
    node judged, or broken with one short line that names where; never an exception."""
    where = data.draw(st.sampled_from(_paths(switch_fact)))
    value = data.draw(_hostile)
    node = judge_node("n1", _set(switch_fact, where, value), FRESH, NOW, 2 * HOUR)
    assert node.state in STATES
    if node.state == BROKEN:
        assert node.reason and len(node.reason) <= 200 and "\n" not in node.reason
        named = re.split(r"[.:\[]", node.reason, maxsplit=1)[0]
        assert named in {str(where[0]), "the fact"}, (where, node.reason)


def test_the_conversion_refuses_what_is_no_fact() -> None:
    not_facts: tuple[object, ...] = ("", [], None, 3, "typhapki")
    for value in not_facts:
        with pytest.raises(BrokenFact, match="the fact: expected a mapping"):
            read_fact(value)
    deep: Any = {"trust": {}}
    inner = deep["trust"]
    for _ in range(40):
        inner["k"] = {}
        inner = inner["k"]
    with pytest.raises(BrokenFact, match="nested deeper"):
        read_fact(deep)
