"""Restart markers: which component must restart to load files a run changed.

Typha reads its own pair and the CA bundle once, at start, and never again: a change to
either needs a Typha restart. Felix (and confd, with the same client code) reads its own
pair and the bundle on every connection to Typha, and Typha never re-checks a live
connection: a renewed Felix leaf, a new key type or a new CA in the bundle is picked up
by the next reconnect, and a restart of calico-node would only make every Felix resync.
What Felix reads at start only comes from its environment (`FELIX_TYPHACN`,
`FELIX_TYPHAURISAN`, the file paths), which the DaemonSet's spec sets and Kubernetes
rolls; no file typhapki writes is among it. So no change of files ever marks Felix
(docs/kubernetes.md, "Restarts after renewal").

When `issue`, `install`, `rotate-ca` or `rollback` changes a file Typha reads, it records
`OUT/.restart-typha` here, atomically, holding one line: the live generation's name
(the newest generation among the directories Typha reads). The marker stays until the
restart happened and `typhapki restart-typha` (an eviction that honours the
PodDisruptionBudget), `typhapki restarted --out OUT --component typha` or `rm -f`
removes it, so a restart that failed or was refused is retried by the next Puppet run:

    exec { 'typhapki-restart-typha':
      command => "typhapki restart-typha --kubeconfig ${kubeconfig}",
      onlyif  => "test -e ${out}/.restart-typha", ... }

`OUT/.restart-felix` is never written any more; `typhapki restarted --component felix`
still removes one that an older typhapki left.

Every writer calls `record_restarts` with the scopes it changed, so the rule of who
reads what lives here only.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.errors import StoreError
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import RoleName
from typhapki.pki.store import current_generation, write_file_atomic

if TYPE_CHECKING:
    from collections.abc import Sequence

    from typhapki.pki.changes import Change


class Component(Enum):
    """A process that reads the set: Typha, or Felix (calico-node)."""

    TYPHA = "typha"
    FELIX = "felix"


# Which components must restart to load the files of each scope a Change names: those
# that read them only at start. Felix re-reads its pair and the bundle on every
# reconnect, so it is in no entry (the module docstring says why).
READERS: dict[str, frozenset[Component]] = {
    "bundle": frozenset({Component.TYPHA}),
    RoleName.TYPHA.value: frozenset({Component.TYPHA}),
    RoleName.FELIX.value: frozenset(),
}

_ROLE = {Component.TYPHA: RoleName.TYPHA, Component.FELIX: RoleName.FELIX}


def marker_path(out: Path, component: Component) -> Path:
    return out / f".restart-{component.value}"


def components_to_restart(scopes: Iterable[str]) -> list[Component]:
    """The components that must restart to load any of `scopes` ("bundle", "typha",
    "felix"), in order: Typha for its pair or the bundle, never Felix."""
    wanted: set[Component] = set()
    for scope in scopes:
        wanted |= READERS[scope]
    return [c for c in Component if c in wanted]


def components_held(out: Path, scopes: Iterable[str]) -> list[Component]:
    """components_to_restart, less those whose set OUT does not hold and `scopes` does
    not write: a worker runs no Typha, and a `.restart-typha` there (after a bundle
    change) would never be cleared by any restart."""
    scopes = set(scopes)
    paths = SetPaths(out)
    return [
        c
        for c in components_to_restart(scopes)
        if _ROLE[c].value in scopes or os.path.lexists(paths.role_dir(_ROLE[c]))
    ]


def restarts_after(out: Path, changes: Sequence[Change]) -> list[str]:
    """The components to restart after `changes`, as `issue --json` and `install --json`
    name them (their markers are already on disk): Typha, when its set or the bundle
    changed and OUT holds Typha's set; never Felix, which re-reads its files on every
    reconnect."""
    return [c.value for c in components_held(out, (ch.scope for ch in changes if ch.restarts))]


def live_generation(out: Path, component: Component) -> str:
    """The newest live generation among the directories `component` reads."""
    paths = SetPaths(out)
    names = [
        g
        for g in (
            current_generation(paths.bundle_dir),
            current_generation(paths.role_dir(_ROLE[component])),
        )
        if g is not None
    ]
    return max(names) if names else "unknown"


@contextlib.contextmanager
def restarts_recorded(out: Path, scopes: Iterable[str]) -> Iterator[list[Component]]:
    """Mark the components that read the changed `scopes`, around the publish it wraps;
    only those whose set OUT holds (or that this publish writes).

    A missing marker is created *before* the files switch, so a full disk fails the run
    while nothing has changed yet (and a switch never happens without its marker); it
    is removed again when the publish fails. After the switch each marker is rewritten
    with the live generation's name (best effort: "pending" stays true if that fails).
    """
    components = components_held(out, scopes)
    created: list[Path] = []
    try:
        for component in components:
            path = marker_path(out, component)
            if not os.path.lexists(path):
                try:
                    write_file_atomic(path, b"pending\n", 0o644)
                except StoreError as exc:
                    raise StoreError(
                        f"{exc}; nothing was changed (the live files are as they were)"
                    ) from None
                created.append(path)
        yield components
    except BaseException:
        for path in created:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    for component in components:
        line = f"{live_generation(out, component)}\n".encode()
        with contextlib.suppress(StoreError):
            write_file_atomic(marker_path(out, component), line, 0o644)


def record_restarts(out: Path, scopes: Iterable[str]) -> list[Component]:
    """Mark the components that read the changed `scopes` (files already published)."""
    with restarts_recorded(out, scopes) as components:
        return components


def pending_restarts(out: Path) -> list[Component]:
    """The components whose marker is present."""
    return [c for c in Component if os.path.lexists(marker_path(out, c))]


def clear_restart(out: Path, component: Component) -> bool:
    """Remove the marker after the restart; True when there was one."""
    try:
        os.unlink(marker_path(out, component))
    except FileNotFoundError:
        return False
    return True


def report_changes(out: Path, roles: list[str], changes: list[Change], as_json: bool) -> None:
    """What `issue` and `install` print: the changes and whom to restart, or nothing to do.

    A new bundle on a node without Typha's set (a worker) needs no restart: Felix reads
    it on its next reconnect, so its line says that, not "restart Typha"."""
    import json

    from typhapki.pki.changes import without_typha

    restart = restarts_after(out, changes)
    if "typha" not in restart:
        changes = without_typha(changes)
    if as_json:
        print(
            json.dumps(
                {
                    "changed": bool(changes),
                    "changes": [c.as_dict() for c in changes],
                    "restart": restart,
                },
                indent=2,
            )
        )
    elif not changes:
        print(f"{out}: {', '.join(roles)} set valid and fresh; nothing changed")
    else:
        for change in changes:
            print(change.line())
