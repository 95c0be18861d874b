"""The stage-move rule: which move of a cluster's stage, forward or back, is allowed,
and behind which gate. One table for the live switch (hiera's `typha.tls_stage`) and
the CA rotation (`typha.trust` and the signer); `fleet gate` and `fleet ready`
(typhapki/commands/fleet.py) ask it, and docs/fleet.md prints it
(tests/fleet/test_moves.py holds the page to the table). Pure: no I/O.

A move the table does not list is refused: a skipped stage, or, for the live switch, a
move back past `switch` (the TLS Typha would go before Felix leaves it). Another kind
of move (an emergency CA roll, say) is rows of its own `track`, never a second rule.
"""

from __future__ import annotations

from typhapki.record import record
from typhapki.settings.wiring import LIVE_STAGES, Stage

# The tracks: what a move moves.
LIVE_SWITCH = "tls_stage"
ROTATION = "rotation"

NONE = "none"  # no `typha.tls_stage` in hiera; no rotation under way

# The gates a move may wait on (what must hold first), as docs/fleet.md names them.
SWITCH_GATE = "switch"  # typhapki/fleet/switch.py switch_gate
RETIRE_GATE = "retire"  # typhapki/fleet/switch.py retire_gate
AT_NONE = "none"  # every member's fact shows rotation stage none
AT_TRUST_NEW = "trust-new"  # every member's fact shows trust-new or reissue
NO_LEAF = "no-leaf"  # no member holds a leaf signed by the CA that leaves typha.trust

SWITCH_GATES = (SWITCH_GATE, RETIRE_GATE)  # judged from the facts and the Kubernetes API
GATES = {
    SWITCH_GATE: "the switch gate passes",
    RETIRE_GATE: "the retire gate passes",
    AT_NONE: "every member at rotation stage none",
    AT_TRUST_NEW: "every member at trust-new (or reissue)",
    NO_LEAF: "no member holds a leaf signed by the CA dropped",
}

FORWARD = "forward"
ROLLBACK = "rollback"
REFUSED = "refused"

# What stands behind the refusals the table does not spell out.
SKIPS = "it skips a stage"
CUTS_FELIX = "the TLS Typha goes before Felix leaves it"
OUTAGE = "Typha and Felix would switch at once, an outage while the pods roll"


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
    return Move(track, before, after, REFUSED, None, SKIPS)


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
    lines.append(f"| either | any other move | | refused | | {SKIPS} |")
    return "\n".join(lines) + "\n"
