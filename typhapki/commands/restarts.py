"""The components to restart after a change, as `issue --json` and `install --json` name them.

The marker file itself (`OUT/.restart-typha`; Felix needs none) is written by
the pki layer (`typhapki.pki.restarts.record_restarts`) in the same locked run that
published the files (docs/kubernetes.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from typhapki.pki.changes import Change


def components(out: Path, changes: Sequence[Change]) -> list[str]:
    """Typha, when its set or the bundle changed and OUT holds Typha's set; never Felix,
    which re-reads its files on every reconnect (typhapki/pki/restarts.py)."""
    from typhapki.pki.restarts import components_held

    return [c.value for c in components_held(out, (ch.scope for ch in changes if ch.restarts))]


def record_restarts(out: Path, changes: Sequence[Change]) -> list[str]:
    """The components to restart after `changes` (their markers are already on disk)."""
    return components(out, changes)
