from __future__ import annotations

from pathlib import Path

from typhapki.errors import UsageError
from typhapki.settings.pki import parse_roles


def rollback(out: Path, role: str | None, bundle: bool) -> int:
    """Make the previous generation of each chosen directory live again.

    Without a role: the roles whose set OUT holds, so that a worker (Felix only) needs
    no --role, and a Typha host rolls back both."""
    import os

    from typhapki.pki.layout import SetPaths
    from typhapki.pki.settings import RoleName
    from typhapki.pki.store import locked
    from typhapki.pki.store import rollback as rollback_dir

    paths = SetPaths(out)
    if not out.is_dir():
        # Checked before the lock, which would otherwise create the directory (a typo).
        raise UsageError(f"{out}: output directory does not exist")
    if role is None:
        roles = [r for r in RoleName if os.path.lexists(paths.role_dir(r))]
        if not roles:
            raise UsageError(f"{out}: holds no Typha or Felix set to roll back")
    else:
        roles = parse_roles(role)
    dirs = [paths.role_dir(r) for r in roles]
    if bundle:
        dirs.insert(0, paths.bundle_dir)
    with locked(paths.lock, create=False):
        for directory in dirs:
            generation = rollback_dir(directory)
            print(f"{directory}: rolled back to {generation}")
    print("restart Typha so it loads the rolled-back files (Felix reads them on reconnect)")
    return 0
