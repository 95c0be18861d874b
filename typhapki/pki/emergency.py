"""The emergency CA roll (docs/rotation.md, "Emergency: the CA key is stolen"): its
steps, and what each means for the set. Pure: no I/O, no certificates.

The planned rotation (typhapki/pki/rotation.py) takes three Typha rolls and never
weakens the firewall rule. When the CA key is stolen, the relaxed rule admits anyone
who mints a leaf, and Felix trusts a Typha leaf of the stolen CA until its bundle drops
it. So the emergency closes the firewall first and reissues Typha's leaf before the
first roll, once every bundle trusts old and new: two Typha rolls, and no calico-node
restart (Felix re-reads its files on every connect from Calico 3.31 on).

=============  ====  ============  =============  =============  ========================
hiera step     step  bundle        Typha leaf by  Felix leaf by  restart
=============  ====  ============  =============  =============  ========================
contain        0     old           old            old            none: the strict rule
trust          1     old + new     old            old            none (deferred to roll 1)
typha-leaf     2     old + new     new            old            Typha roll 1 (step 3)
felix-leaf     4     old + new     new            new            none: read on connect
drop           5a    new           new            new            Typha roll 2 (step 5b)
done           -     new           new            new            none
=============  ====  ============  =============  =============  ========================

The firewall rule is strict at every step, `done` included: it stays so until the
emergency leaves hiera, which is choosing `typha.mode` again.
"""

from __future__ import annotations

CONTAIN = "contain"
TRUST = "trust"
TYPHA_LEAF = "typha-leaf"
FELIX_LEAF = "felix-leaf"
DROP = "drop"
DONE = "done"
# The hiera values of `typha.emergency.step`, in order.
STEPS = (CONTAIN, TRUST, TYPHA_LEAF, FELIX_LEAF, DROP, DONE)
# Each value's step in issue 41's numbering (3 and 5b are the Typha rolls).
NUMBERS = {CONTAIN: "0", TRUST: "1", TYPHA_LEAF: "2", FELIX_LEAF: "4", DROP: "5a", DONE: "5b done"}

# The Typha rolls: not hiera values, but what `fleet ready` judges before the next step.
ROLL_1 = "typha-roll-1"  # step 3
ROLL_2 = "typha-roll-2"  # step 5b

OLD, NEW = "old", "new"


def index(step: str) -> int:
    """The step's place in STEPS; ValueError for a value that is none."""
    return STEPS.index(step)


def signer_side(step: str, role: str) -> str:
    """Which CA signs ROLE's leaf ("typha" or "felix") at STEP: old or new."""
    at = index(step)
    if role == "typha":
        return NEW if at >= index(TYPHA_LEAF) else OLD
    return NEW if at >= index(FELIX_LEAF) else OLD


def bundle_sides(step: str) -> tuple[str, ...]:
    """The CAs the bundle holds at STEP."""
    at = index(step)
    if at < index(TRUST):
        return (OLD,)
    if at < index(DROP):
        return (OLD, NEW)
    return (NEW,)


def needs_new_ca(step: str) -> bool:
    """Whether STEP needs the new CA named (every step from trust on)."""
    return index(step) >= index(TRUST)


def needs_new_label(step: str) -> bool:
    """Whether STEP signs anything by the new CA (cfssl: its label is needed)."""
    return index(step) >= index(TYPHA_LEAF)


def defers_typha_restart(step: str) -> bool:
    """Whether a bundle change at STEP leaves no Typha restart marker: at trust the
    running Typhas keep the old bundle until roll 1, which loads it with the new leaf
    (one roll fewer than the planned rotation; nothing presents a new-CA leaf before)."""
    return step == TRUST
