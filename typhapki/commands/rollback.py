from __future__ import annotations

from pathlib import Path

from typhapki.errors import UsageError
from typhapki.settings.pki import parse_roles


def rollback(out: Path, role: str, bundle: bool) -> int:
    """Make the previous generation of each chosen directory live again."""
    from typhapki.pki.layout import SetPaths
    from typhapki.pki.store import locked
    from typhapki.pki.store import rollback as rollback_dir

    paths = SetPaths(out)
    dirs = [paths.role_dir(r) for r in parse_roles(role)]
    if bundle:
        dirs.insert(0, paths.bundle_dir)
    if not out.is_dir():
        # Checked before the lock, which would otherwise create the directory (a typo).
        raise UsageError(f"{out}: output directory does not exist")
    with locked(paths.lock, create=False):
        for directory in dirs:
            generation = rollback_dir(directory)
            print(f"{directory}: rolled back to {generation}")
    print("restart Typha and calico-node so they load the rolled-back files")
    return 0
