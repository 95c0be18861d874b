from __future__ import annotations

from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import UsageError
from typhapki.settings.pki import parse_roles


def rollback(out: Path, role: str | None, bundle: bool) -> int:
    """Make the previous generation of each chosen directory live again.

    Without a role: the roles whose set OUT holds, so that a worker (Felix only) needs
    no --role, and a Typha host rolls back both. Typha is told to restart (and marked,
    as `issue` marks it: typhapki/pki/restarts.py) only when it reads a file that went
    back and OUT holds its set; Felix reads the files again on its next reconnect."""
    import os

    from typhapki.pki.layout import SetPaths
    from typhapki.pki.restarts import Component, restarts_recorded
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
    scopes = [r.value for r in roles] + (["bundle"] if bundle else [])
    with locked(paths.lock, create=False), restarts_recorded(out, scopes) as restart:
        for directory in dirs:
            generation = rollback_dir(directory)
            print(f"{directory}: rolled back to {generation}")
    if Component.TYPHA in restart:
        print("restart Typha so it loads the rolled-back files (Felix reads them on reconnect)")
    else:
        print("Felix reads the rolled-back files on its next reconnect to Typha: no restart")
    return 0


def run(request: CommandRequest) -> int:
    """`rollback`."""
    return rollback(request.out, request.role, request.bundle)
