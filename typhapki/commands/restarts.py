"""Which components must restart after a change, and the markers that say so.

INTERFACES.md §1: the marker files (`OUT/.restart-typha`, `OUT/.restart-felix`) are
written by one shared function in the pki layer (`typhapki.pki.restarts`, owned by the
runbooks work). Until that lands, this only computes the components to name.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from typhapki.pki.issuance import Change


def components(changes: Sequence[Change]) -> list[str]:
    """Typha reads its set and the bundle; Felix reads its set and the bundle."""
    out: set[str] = set()
    for change in changes:
        if change.action == "fixed permissions":
            continue
        if change.scope == "bundle":
            out.update(("typha", "felix"))
        else:
            out.add(change.scope)
    return sorted(out)


def record_restarts(out: Path, changes: Sequence[Change]) -> list[str]:
    """The components to restart after `changes`; their markers, once the layer has them."""
    names = components(changes)
    # Hook: wired to typhapki.pki.restarts once it is in main (INTERFACES.md §1).
    return names
