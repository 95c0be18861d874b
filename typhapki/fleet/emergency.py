"""The emergency CA roll's gates (docs/rotation.md, "Emergency: the CA key is stolen"),
judged from the members' facts: what `fleet gate` asks before each hiera step
(typhapki/fleet/moves.py names them), what `fleet ready --stage` judges after each
step and each Typha roll, and what `fleet` shows per cluster. Pure: no I/O.

Every condition is judged by fingerprints against the new CA hiera names
(`typha.emergency.new_ca`), never by stage names. A member whose fact cannot be
believed (missing, broken, stale, stamped in the future) holds every gate back. A
"Typha host" is a member whose fact shows a running Typha or the Typha rule
(`ferm_gate`); a member holding a Typha leaf is judged by its leaf wherever Typha
may be scheduled.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from typhapki.fleet import moves
from typhapki.fleet.nodes import STALE, Node
from typhapki.fleet.readiness import Readiness
from typhapki.pki import emergency as roll

# `fleet ready --stage` for the emergency: each hiera step (every member reached it)
# and each Typha roll, and the conditions each judges.
CONTAIN, TRUST, TYPHA_LEAF, FELIX_LEAF, DROP = roll.STEPS[:5]
ROLL_1, ROLL_2 = roll.ROLL_1, roll.ROLL_2
READY_STAGES = (CONTAIN, TRUST, TYPHA_LEAF, ROLL_1, FELIX_LEAF, DROP, ROLL_2)

Condition = Callable[[Node, str | None], str]  # why the member misses it ("" when not)


def _strict(node: Node, _new: str | None) -> str:
    if not (node.typha_running or node.writes_rule):
        return ""  # no Typha here, and no Typha rule to write
    if not node.writes_rule:
        return "runs Typha, but its fact shows no Typha rule (ferm_gate)"
    if node.rule != "strict":
        return f"the rule in force is {node.rule or 'not recorded yet'}, not strict"
    return ""


def _both(node: Node, new: str | None) -> str:
    if new not in node.bundle:
        return "bundle lacks the new CA"
    return "" if len(node.bundle) > 1 else "bundle holds the new CA alone, not old and new"


def _typha_leaf(node: Node, new: str | None) -> str:
    if node.typha_issuer is None:
        return "runs Typha without a Typha leaf" if node.typha_running else ""
    return "" if node.typha_issuer == new else "Typha leaf not by the new CA"


def _started_after(node: Node, _new: str | None) -> str:
    if node.typha_running and node.typha_pending:
        return "Typha started before its live files (restart pending)"
    return ""


def _felix_leaf(node: Node, new: str | None) -> str:
    if node.felix_issuer is None:
        return "no Felix leaf"
    return "" if node.felix_issuer == new else "Felix leaf not by the new CA"


def _new_only(node: Node, new: str | None) -> str:
    return "" if node.bundle == {new} else "bundle holds more than the new CA"


CONDITIONS: dict[str, tuple[Condition, ...]] = {
    CONTAIN: (_strict,),
    TRUST: (_both,),
    TYPHA_LEAF: (_typha_leaf,),
    ROLL_1: (_typha_leaf, _started_after),
    FELIX_LEAF: (_felix_leaf,),
    DROP: (_new_only,),
    ROLL_2: (_new_only, _started_after),
}
# The gates of the stage-move rule, as the conditions of the stages above.
GATES: dict[str, tuple[Condition, ...]] = {
    moves.STRICT_IN_FORCE: CONDITIONS[CONTAIN],
    moves.BOTH_CAS: CONDITIONS[TRUST],
    moves.TYPHA_ROLL_1: CONDITIONS[ROLL_1],
    moves.FELIX_NEW: CONDITIONS[FELIX_LEAF],
    moves.TYPHA_ROLL_2: CONDITIONS[ROLL_2],
    moves.FROM_REISSUE: (_strict, _typha_leaf, _felix_leaf, _started_after),
}
_NEEDS_CA = frozenset(READY_STAGES) - {CONTAIN}


def _believed(node: Node) -> str:
    if not node.judged or node.state == STALE:
        return node.state + (f": {node.reason}" if node.reason else "")
    return ""


def misses(conditions: tuple[Condition, ...], node: Node, new_ca: str | None) -> list[str]:
    """Each condition NODE misses, in words (none: it passes)."""
    if why := _believed(node):
        return [why]
    return [why for condition in conditions if (why := condition(node, new_ca))]


def _judge(
    name: str, conditions: tuple[Condition, ...], nodes: Iterable[Node], new_ca: str | None
) -> Readiness:
    holding: list[tuple[str, str]] = []
    count = 0
    for node in sorted(nodes, key=lambda n: n.certname):
        count += 1
        if new_ca is None and conditions != CONDITIONS[CONTAIN]:
            holding.append((node.certname, "the new CA (typha.emergency.new_ca) cannot be read"))
        elif found := misses(conditions, node, new_ca):
            holding.append((node.certname, "; ".join(found)))
    return Readiness(name, count, holding)


def ready(stage: str, nodes: Iterable[Node], new_ca: str | None) -> Readiness:
    """Whether every member reached the emergency's STAGE (READY_STAGES)."""
    return _judge(stage, CONDITIONS[stage], nodes, new_ca)


def gate(name: str, nodes: Iterable[Node], new_ca: str | None) -> Readiness:
    """Whether the stage-move rule's emergency gate NAME passes (moves.EMERGENCY_GATES)."""
    return _judge(name, GATES[name], nodes, new_ca)


def needs_new_ca(stage: str) -> bool:
    return stage in _NEEDS_CA


def next_gate(step: str) -> tuple[str, str] | None:
    """(the next hiera step, the gate before it) from STEP, by the stage-move rule; None
    at the end."""
    for move in moves.TABLE:
        if (
            move.track == moves.EMERGENCY
            and move.source == step
            and move.kind == moves.FORWARD
            and move.gate is not None
            and move.gate != moves.FROM_REISSUE
        ):
            return move.target, move.gate
    return None


# A planned rotation's stage (docs/rotation.md) as the emergency step it equals.
PLANNED = {
    "trust-new": f"emergency step 1 ({TRUST})",
    "reissue": f"emergency step 4 ({FELIX_LEAF}) once Typha roll 1 happened",
}


def planned_maps_to(nodes: Iterable[Node]) -> str | None:
    """The planned rotation under way, as the emergency step it equals: the stage every
    believed member's fact shows (reissue when all are there, else trust-new when all
    trust the new CA); None when no planned rotation is under way."""
    stages = {n.stage for n in nodes if not _believed(n)}
    if not stages or not stages <= {"trust-new", "reissue"}:
        return None
    stage = "reissue" if stages == {"reissue"} else "trust-new"
    return f"planned {stage} = {PLANNED[stage]}"
