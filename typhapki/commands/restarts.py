"""The components to restart after a change, as `issue --json` and `install --json` name them.

The marker files themselves (`OUT/.restart-typha`, `OUT/.restart-felix`) are written by
the pki layer (`typhapki.pki.restarts.record_restarts`) in the same locked run that
published the files (INTERFACES.md §1).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from typhapki.pki.changes import Change


def components(changes: Sequence[Change]) -> list[str]:
    """Typha reads its set and the bundle; Felix reads its set and the bundle."""
    from typhapki.pki.restarts import components_to_restart

    return [c.value for c in components_to_restart(ch.scope for ch in changes if ch.restarts)]


def record_restarts(out: Path, changes: Sequence[Change]) -> list[str]:
    """The components to restart after `changes` (their markers are already on disk)."""
    del out  # the pki layer wrote the markers under the lock
    return components(changes)
