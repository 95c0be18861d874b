"""The stage-move rule: which move of a cluster's stage, forward or back, is allowed,
and behind which gate. One table for the live switch (hiera's `typha.tls_stage`) and
the CA rotation (`typha.trust` and the signer) and the emergency CA roll
(`typha.emergency.step`, typhapki/pki/emergency.py); `fleet gate` and `fleet ready`
(typhapki/commands/fleet_gate.py, typhapki/commands/fleet_ready.py) ask it, and
docs/fleet.md prints it (tests/fleet/test_moves.py holds the page to the table). Pure: no I/O.

A move the table does not list is refused: a skipped stage, or, for the live switch, a
move back past `switch` (the TLS Typha would go before Felix leaves it), or, for the
emergency, a move back past `contain` (the relaxed rule would open again while the key
is stolen). Another kind of move is rows of its own `track`, never a second rule.
"""

from __future__ import annotations

from typhapki.pki import emergency as roll
from typhapki.record import record
from typhapki.settings.wiring import LIVE_STAGES, Stage

# The tracks: what a move moves.
LIVE_SWITCH = "tls_stage"
ROTATION = "rotation"
EMERGENCY = "emergency"

NONE = "none"  # no `typha.tls_stage` in hiera; no rotation under way

# The gates a move may wait on (what must hold first), as docs/fleet.md names them.
SWITCH_GATE = "switch"  # typhapki/fleet/switch.py switch_gate
RETIRE_GATE = "retire"  # typhapki/fleet/switch.py retire_gate
AT_NONE = "none"  # every member's fact shows rotation stage none
AT_TRUST_NEW = "trust-new"  # every member's fact shows trust-new or reissue
NO_LEAF = "no-leaf"  # no member holds a leaf signed by the CA that leaves typha.trust
# The emergency's gates (typhapki/fleet/emergency.py judges them from the facts).
STRICT_IN_FORCE = "strict-in-force"
BOTH_CAS = "both-cas"
TYPHA_ROLL_1 = roll.ROLL_1
FELIX_NEW = "felix-new"
TYPHA_ROLL_2 = roll.ROLL_2
FROM_REISSUE = "from-reissue"
EMERGENCY_GATES = (STRICT_IN_FORCE, BOTH_CAS, TYPHA_ROLL_1, FELIX_NEW, TYPHA_ROLL_2, FROM_REISSUE)

SWITCH_GATES = (SWITCH_GATE, RETIRE_GATE)  # judged from the facts and the Kubernetes API
GATES = {
    SWITCH_GATE: "the switch gate passes",
    RETIRE_GATE: "the retire gate passes",
    AT_NONE: "every member at rotation stage none",
    AT_TRUST_NEW: "every member at trust-new (or reissue)",
    NO_LEAF: "no member holds a leaf signed by the CA dropped",
    STRICT_IN_FORCE: "every Typha host's fact shows the strict rule in force",
    BOTH_CAS: "every member's bundle holds the new CA and the old",
    TYPHA_ROLL_1: "every member's Typha leaf by the new CA, every Typha started after it",
    FELIX_NEW: "every member's Felix leaf by the new CA",
    TYPHA_ROLL_2: "every member's bundle the new CA alone, every Typha started after it",
    FROM_REISSUE: "the strict rule in force, every leaf by the new CA, every Typha "
    "started after its leaf (a planned rotation at reissue, roll 1 done)",
}

FORWARD = "forward"
ROLLBACK = "rollback"
REFUSED = "refused"

# What stands behind the refusals the table does not spell out.
SKIPS = "it skips a stage"
CUTS_FELIX = "the TLS Typha goes before Felix leaves it"
OUTAGE = "Typha and Felix would switch at once, an outage while the pods roll"
REOPENS = "it goes back past step 0: the relaxed rule would open again while the key is stolen"


@record(frozen=True)
class Move:
    """One row: a move of TRACK from SOURCE to TARGET, its kind, its gate (None: none)
    and why it is allowed or refused."""

    track: str
    source: str
    target: str
    kind: str
    gate: str | None = None
    why: str = ""

    @property
    def allowed(self) -> bool:
        return self.kind != REFUSED

    def named(self) -> str:
        """The move in words: `tls_stage retire -> none`."""
        return f"{self.track} {self.source} -> {self.target}"


def _live(source: str, target: str, kind: str, gate: str | None, why: str) -> Move:
    return Move(LIVE_SWITCH, source, target, kind, gate, why)


def _rotation(source: str, target: str, kind: str, gate: str | None, why: str) -> Move:
    return Move(ROTATION, source, target, kind, gate, why)


def _emergency(source: str, target: str, kind: str, gate: str | None, why: str) -> Move:
    return Move(EMERGENCY, source, target, kind, gate, why)


# Each forward step of the emergency behind the gate of the step before (issue 41's
# table; steps 3 and 5b, the Typha rolls, are in the gates of the step after them).
_FORWARD_STEPS = (
    (NONE, roll.CONTAIN, None, "the strict rule replaces the relaxed one, at once"),
    (roll.CONTAIN, roll.TRUST, STRICT_IN_FORCE, "every bundle trusts old and new"),
    (roll.TRUST, roll.TYPHA_LEAF, BOTH_CAS, "Typha's leaf from the new CA"),
    (roll.TYPHA_LEAF, roll.FELIX_LEAF, TYPHA_ROLL_1, "Felix's leaf from the new CA"),
    (roll.FELIX_LEAF, roll.DROP, FELIX_NEW, "the bundle drops the stolen CA"),
    (roll.DROP, roll.DONE, TYPHA_ROLL_2, "the emergency is over; the rule stays strict"),
    (roll.DONE, NONE, None, "typha.mode rules the firewall again"),
)

P, S, R = (stage.value for stage in LIVE_STAGES)
A = Stage.ALL_AT_ONCE.value
TABLE: tuple[Move, ...] = (
    # The live switch (docs/kubernetes.md section 4).
    _live(NONE, P, FORWARD, None, "a TLS Typha beside the plain one"),
    _live(A, P, FORWARD, None, "a TLS Typha beside the plain one"),
    _live(P, S, FORWARD, SWITCH_GATE, "calico-node dials the TLS Typha"),
    _live(S, R, FORWARD, RETIRE_GATE, "the plain Typha goes"),
    _live(S, P, ROLLBACK, None, "the plain Typha is still there"),
    _live(R, S, ROLLBACK, None, "it re-adds the plain Typha; Felix stays on TLS"),
    _live(NONE, A, FORWARD, None, "the same one Typha, its stage declared"),
    _live(A, NONE, ROLLBACK, None, "the same one Typha, its stage undeclared"),
    *(_live(P, t, REFUSED, None, OUTAGE) for t in (A, NONE)),
    *(_live(s, t, REFUSED, None, CUTS_FELIX) for s in (S, R) for t in (A, NONE)),
    # The CA rotation (docs/rotation.md), as a hiera change makes it.
    _rotation(NONE, "trust-new", FORWARD, AT_NONE, "adds a CA to typha.trust"),
    _rotation("trust-new", "reissue", FORWARD, AT_TRUST_NEW, "moves the signer"),
    _rotation("reissue", "drop-old", FORWARD, NO_LEAF, "removes a CA from typha.trust"),
    _rotation("reissue", "trust-new", ROLLBACK, AT_TRUST_NEW, "moves the signer back"),
    _rotation("trust-new", NONE, ROLLBACK, NO_LEAF, "removes the CA only just trusted"),
    _rotation(NONE, "reissue", REFUSED, None, "moves the signer to a CA no bundle trusts yet"),
    # The emergency CA roll (docs/rotation.md, "Emergency: the CA key is stolen").
    *(_emergency(s, t, FORWARD, g, why) for s, t, g, why in _FORWARD_STEPS),
    _emergency(
        roll.CONTAIN,
        roll.FELIX_LEAF,
        FORWARD,
        FROM_REISSUE,
        "a planned rotation at reissue, roll 1 done, is step 4",
    ),
    *(
        _emergency(t, s, ROLLBACK, None, "one step back; the rule stays strict")
        for s, t, _g, _w in _FORWARD_STEPS[1:-1]
    ),
    *(_emergency(s, NONE, REFUSED, None, REOPENS) for s in roll.STEPS[:-1]),
)

_BY_MOVE = {(m.track, m.source, m.target): m for m in TABLE}


def judge(track: str, source: str | None, target: str | None) -> Move | None:
    """The row of the move of TRACK from SOURCE to TARGET (None: no stage, `none`);
    None when nothing moves. A move no row lists is refused: it skips a stage."""
    before, after = source or NONE, target or NONE
    if before == after:
        return None
    found = _BY_MOVE.get((track, before, after))
    if found is not None:
        return found
    if track == EMERGENCY:
        return Move(track, before, after, REFUSED, None, _emergency_refusal(before, after))
    return Move(track, before, after, REFUSED, None, SKIPS)


def _emergency_refusal(before: str, after: str) -> str:
    """Why the emergency's move no row lists is refused, naming the step it skips."""
    steps = (NONE, *roll.STEPS)
    if before not in steps or after not in steps:
        return f"{SKIPS}: expected one of {', '.join(steps)}"
    start, end = steps.index(before), steps.index(after)
    if end > start:
        return f"it skips step {steps[start + 1]}"
    return f"it goes back more than one step: it skips step {steps[start - 1]}"


def live_stages() -> tuple[str, ...]:
    """Every value of the live switch's track: none and the declared stages."""
    return (NONE, *(s.value for s in Stage))


def gated_targets() -> dict[str, str]:
    """Each stage a gate guards -> that gate: what `fleet ready --stage` judges."""
    return {m.target: m.gate for m in TABLE if m.kind == FORWARD and m.gate is not None}


def markdown() -> str:
    """The table as docs/fleet.md prints it (tests/fleet/test_moves.py compares)."""
    lines = ["| track | from | to | allowed | gate | why |", "|---|---|---|---|---|---|"]
    for m in TABLE:
        allowed = {FORWARD: "yes", ROLLBACK: "yes (rollback)", REFUSED: "refused"}[m.kind]
        gate = GATES[m.gate] if m.gate else ""
        lines.append(
            f"| `{m.track}` | `{m.source}` | `{m.target}` | {allowed} | {gate} | {m.why} |"
        )
    lines.append(f"| any | any other move | | refused | | {SKIPS} (naming the step skipped) |")
    return "\n".join(lines) + "\n"
