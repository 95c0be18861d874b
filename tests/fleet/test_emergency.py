"""The emergency CA roll's fleet view (typhapki/fleet/emergency.py): each gate judged
from generated members' facts against the issue's table written out here, the facts'
new evidence read as hostile, and `fleet gate`, `fleet ready` and `fleet` against the
PuppetDB stand-in with a real hiera change."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from tests.support.puppetdb import StandIn, StandInNode, valid_fact
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK
from typhapki.fleet import emergency, moves
from typhapki.fleet.nodes import BROKEN, judge_node

OLD, NEW = "a" * 64, "b" * 64
NOW = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


@st.composite
def _member(draw: st.DrawFn) -> dict[str, Any]:
    """One member's fact: which CAs its bundle holds, who signed each leaf, its rule in
    force (None: it writes none), whether Typha runs and started after its files."""
    fact = valid_fact(NOW, "lab")
    bundle = draw(st.sampled_from([[OLD], [OLD, NEW], [NEW, OLD], [NEW]]))
    typha = draw(st.sampled_from([OLD, NEW, None]))
    felix = draw(st.sampled_from([OLD, NEW, None]))
    issuers = {k: v for k, v in (("typha", typha), ("felix", felix)) if v is not None}
    fact["trust"] = {"bundle": bundle, "leaf_issuers": issuers, "stage": None}
    rule = draw(st.sampled_from(["strict", "relaxed", None, "absent"]))
    if rule != "absent":
        fact["ferm_gate"] = {"rule": rule, "hosts_failed": 0, "error": None}
    running = draw(st.booleans())
    pending = draw(st.booleans())
    fact["restart"] = {"typha": {"running": running, "restart_pending": pending and running}}
    return fact


def _expected(gate: str, fact: dict[str, Any]) -> bool:
    """Whether a member passes GATE, as issue 41's table says."""
    bundle = set(fact["trust"]["bundle"])
    issuers = fact["trust"]["leaf_issuers"]
    running = fact["restart"]["typha"]["running"]
    started_after = not fact["restart"]["typha"]["restart_pending"]
    gate_fact = fact.get("ferm_gate")
    typha_host = running or gate_fact is not None
    strict = not typha_host or (gate_fact is not None and gate_fact["rule"] == "strict")
    typha_new = issuers.get("typha") == NEW or ("typha" not in issuers and not running)
    felix_new = issuers.get("felix") == NEW
    passes: dict[str, bool] = {
        moves.STRICT_IN_FORCE: strict,
        moves.BOTH_CAS: bundle == {OLD, NEW},
        moves.TYPHA_ROLL_1: typha_new and started_after,
        moves.FELIX_NEW: felix_new,
        moves.TYPHA_ROLL_2: bundle == {NEW} and started_after,
        moves.FROM_REISSUE: strict and typha_new and felix_new and started_after,
    }
    return passes[gate]


@settings(max_examples=50, deadline=None)
@given(members=st.lists(_member(), min_size=1, max_size=5))
def test_every_emergency_gate_as_the_issue_says(members: list[dict[str, Any]]) -> None:
    nodes = [
        judge_node(f"kube{i}.example", fact, NOW.isoformat(), NOW, timedelta(hours=2))
        for i, fact in enumerate(members)
    ]
    for gate in moves.EMERGENCY_GATES:
        verdict = emergency.gate(gate, nodes, NEW)
        held = {certname for certname, _ in verdict.holding_back}
        expected = {
            f"kube{i}.example" for i, fact in enumerate(members) if not _expected(gate, fact)
        }
        assert held == expected, (gate, verdict.holding_back)
        # Without the new CA nothing but the firewall can be judged: every member holds.
        if gate != moves.STRICT_IN_FORCE:
            assert len(emergency.gate(gate, nodes, None).holding_back) == len(nodes)


def test_a_hostile_rule_or_restart_breaks_the_fact_not_the_run() -> None:
    for part, value in [
        ("ferm_gate", {"rule": "open"}),
        ("ferm_gate", {"rule": ["strict"]}),
        ("restart", {"typha": {"running": "yes"}}),
        ("restart", {"typha": {"running": True, "restart_pending": 1}}),
        ("restart", {"typha": []}),
    ]:
        fact = valid_fact(NOW, "lab")
        fact[part] = value
        node = judge_node("kube1.example", fact, NOW.isoformat(), NOW, timedelta(hours=2))
        assert node.state == BROKEN, (part, value, node)
        # A broken fact holds every emergency gate back, naming why.
        [(_, why)] = emergency.gate(moves.STRICT_IN_FORCE, [node], NEW).holding_back
        assert why.startswith(BROKEN)


def _ca(tmp_path: Path, name: str) -> tuple[str, str]:
    from typhapki.pki.pem import load_certs
    from typhapki.pki.verify import fingerprint

    ca = tmp_path / name
    assert run_cli("ca", "init", "--ca-dir", ca).returncode == 0
    path = ca / "typhaca.crt"
    return path.read_text(), fingerprint(load_certs(path, "CA")[0])


def _hiera(path: Path, step: str | None, pem: str | None = None) -> Path:
    typha: dict[str, Any] = {"mode": "relaxed"}
    if step is not None:
        typha["emergency"] = {"step": step, **({"new_ca": pem} if pem else {})}
    cluster = {"cluster_nodes": ["10.64.0.1"], "typha": typha}
    path.write_text(yaml.safe_dump({"kubernetes::clusters": {"main": {"lab": cluster}}}))
    return path


def _fact(bundle: list[str], typha: str, felix: str, rule: str = "strict",
          pending: bool = False) -> dict[str, Any]:  # fmt: skip
    fact = valid_fact(datetime.now(UTC), "lab")
    fact["trust"] = {"bundle": bundle, "leaf_issuers": {"typha": typha, "felix": felix},
                     "stage": None}  # fmt: skip
    fact["ferm_gate"] = {"rule": rule, "hosts_failed": 0, "error": None}
    fact["restart"] = {"typha": {"running": True, "restart_pending": pending}}
    return fact


def test_fleet_gate_moves_the_emergency_step_by_step(standin: StandIn, tmp_path: Path) -> None:
    """Each hiera step passes only behind its gate, naming the members that hold it;
    a skip and a move back past contain are refused from hiera alone."""
    pem, new = _ca(tmp_path, "ca-new")
    old = "a" * 64  # valid_fact's CA

    def gate(before: str | None, after: str | None, *db: str) -> Any:
        a = _hiera(tmp_path / "old.yaml", before, pem)
        b = _hiera(tmp_path / "new.yaml", after, pem)
        return run_cli("fleet", "gate", "--hiera", b, "--old", a,
                       *(db or ("--puppetdb", standin.url)))  # fmt: skip

    # Step 0 goes at once: no gate, no PuppetDB needed.
    contain = gate(None, "contain", "--no-puppetdb")
    assert contain.returncode == EXIT_OK, contain.stdout + contain.stderr
    assert "moves typha.emergency from none to contain: allowed, no gate" in contain.stdout
    # A skip, and a move back past step 0, are refused without PuppetDB.
    skip = gate("contain", "typha-leaf", "--no-puppetdb")
    assert skip.returncode == EXIT_NEEDS_ACTION
    assert "from contain to typha-leaf: refused: it skips step trust" in skip.stdout
    back = gate("trust", None, "--no-puppetdb")
    assert back.returncode == EXIT_NEEDS_ACTION and moves.REOPENS in back.stdout

    # contain -> trust: every Typha host shows the strict rule in force.
    standin.nodes = {f"kube{i}.example.org": StandInNode("lab", _fact([old], old, old))
                     for i in range(3)}  # fmt: skip
    standin.nodes["kube1.example.org"] = StandInNode("lab", _fact([old], old, old, "relaxed"))
    held = gate("contain", "trust")
    assert held.returncode == EXIT_NEEDS_ACTION, held.stdout + held.stderr
    assert "1 of 3 members miss strict-in-force" in held.stdout
    assert "kube1.example.org: the rule in force is relaxed, not strict" in held.stdout
    standin.nodes["kube1.example.org"] = StandInNode("lab", _fact([old], old, old))
    passed = gate("contain", "trust")
    assert passed.returncode == EXIT_OK, passed.stdout + passed.stderr
    assert "all 3 members pass strict-in-force" in passed.stdout

    # typha-leaf -> felix-leaf: Typha roll 1 done everywhere (leaf new, started after it).
    for i in range(3):
        standin.nodes[f"kube{i}.example.org"] = StandInNode("lab", _fact([old, new], new, old))
    standin.nodes["kube2.example.org"] = StandInNode(
        "lab", _fact([old, new], new, old, pending=True)
    )
    roll = gate("typha-leaf", "felix-leaf")
    assert roll.returncode == EXIT_NEEDS_ACTION, roll.stdout + roll.stderr
    assert "kube2.example.org: Typha started before its live files" in roll.stdout

    # fleet ready names the same member after the roll, and passes once it restarted.
    ready = ["fleet", "ready", "--cluster", "lab", "--stage", "typha-roll-1",
             "--new-ca", new, "--puppetdb", standin.url]  # fmt: skip
    result = run_cli(*ready)
    assert result.returncode == EXIT_NEEDS_ACTION
    assert result.stdout.startswith("kube2.example.org: Typha started before")
    assert "1 of 3 members hold emergency typha-roll-1 back" in result.stderr
    standin.nodes["kube2.example.org"] = StandInNode("lab", _fact([old, new], new, old))
    result = run_cli(*ready)
    assert result.returncode == EXIT_OK, result.stdout + result.stderr
    assert result.stdout == "cluster lab: all 3 members reached emergency typha-roll-1\n"

    # `fleet` shows the step and what each member still misses for the next gate.
    shown = run_cli("fleet", "--puppetdb", standin.url, "--hiera",
                    _hiera(tmp_path / "now.yaml", "typha-leaf", pem))  # fmt: skip
    assert "emergency: step typha-leaf (2); next: felix-leaf behind typha-roll-1: " \
        "0 of 3 members miss it" in shown.stdout, shown.stdout  # fmt: skip


def test_fleet_shows_a_planned_rotation_as_the_emergency_step(
    standin: StandIn, tmp_path: Path
) -> None:
    old, new = "a" * 64, "b" * 64
    standin.nodes = {}
    for i in range(2):
        fact = _fact([old, new], new, new)
        fact["trust"]["stage"] = "reissue"
        standin.nodes[f"kube{i}.example.org"] = StandInNode("lab", fact)
    shown = run_cli("fleet", "--puppetdb", standin.url, "--hiera",
                    _hiera(tmp_path / "h.yaml", None))  # fmt: skip
    mapped = "planned reissue = emergency step 4 (felix-leaf) once Typha roll 1 happened"
    assert f"emergency: none ({mapped})" in shown.stdout, shown.stdout
    # The gate shows the same mapping, and lets the emergency start from there.
    pem, new_fp = _ca(tmp_path, "ca-new")
    for name in standin.nodes:
        fact = _fact([old, new_fp], new_fp, new_fp)
        fact["trust"]["stage"] = "reissue"
        standin.nodes[name] = StandInNode("lab", fact)
    gate = run_cli("fleet", "gate", "--hiera", _hiera(tmp_path / "n.yaml", "felix-leaf", pem),
                   "--old", _hiera(tmp_path / "o.yaml", "contain", pem),
                   "--puppetdb", standin.url)  # fmt: skip
    assert gate.returncode == EXIT_OK, gate.stdout + gate.stderr
    assert f"cluster lab: {mapped}" in gate.stdout
    assert "from contain to felix-leaf: all 2 members pass from-reissue" in gate.stdout


def test_fleet_ready_emergency_usage_and_since(standin: StandIn) -> None:
    """Every emergency stage but contain needs the new CA; a fact uploaded before
    --since cannot show the step and holds it back."""
    old, new = "a" * 64, "b" * 64
    base = ["fleet", "ready", "--cluster", "lab", "--puppetdb", standin.url]
    missing = run_cli(*base, "--stage", "drop")
    assert missing.returncode == 2 and "--stage drop (emergency) needs --new-ca" in missing.stderr
    earlier = datetime.now(UTC) - timedelta(minutes=30)
    standin.nodes = {
        "kube1.example.org": StandInNode("lab", _fact([new], new, new)),
        "kube2.example.org": StandInNode("lab", _fact([new], new, new), earlier.isoformat()),
    }
    since = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    result = run_cli(*base, "--stage", "typha-roll-2", "--new-ca", new, "--since", since)
    assert result.returncode == EXIT_NEEDS_ACTION, result.stdout + result.stderr
    assert result.stdout.startswith("kube2.example.org: fact stale: fact uploaded ")
    assert "before --since" in result.stdout and "kube1" not in result.stdout
    assert old not in result.stdout
