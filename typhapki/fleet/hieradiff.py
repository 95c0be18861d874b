"""The hiera change `fleet gate` judges: the tree before it, from a git revision
(`--base`) or a path (`--old`), and the entries it cannot judge (typhapki/fleet/gate.py
`git_tree` and `unjudged`). git is run with arguments only, never through a shell.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.errors import UsageError

if TYPE_CHECKING:
    from typhapki.fleet.gate import RotationKeys, Unjudged


def keys_before(
    hiera: Path, base: str | None, old: Path | None
) -> tuple[list[Unjudged], dict[str, RotationKeys]]:
    """The entries of either tree the gate cannot judge, else (none) the clusters' keys
    before the change: at git revision BASE of HIERA's repository, or in the tree OLD."""
    from typhapki.fleet.gate import rotation_keys, unjudged
    from typhapki.provenance import existing

    with tempfile.TemporaryDirectory(prefix="typhapki-gate-") as tmp:
        if old is not None:
            existing("old", old, "file or directory")
            old_path, refused_entries = old, unjudged(old)
            refused_entries += unjudged(hiera)
        else:  # the base's tree, and the working tree as git sees it
            old_path, refused_entries = old_tree(hiera, base or "", Path(tmp))
        if refused_entries:
            return refused_entries, {}
        return [], rotation_keys(old_path) if has_yaml(old_path) else {}


def _git(*args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", *args], capture_output=True, stdin=subprocess.DEVNULL)
    except OSError as exc:
        raise UsageError(f"--base: cannot run git: {exc.strerror or exc}") from None


def old_tree(hiera: Path, base: str, into: Path) -> tuple[Path, list[Unjudged]]:
    """HIERA as it was at git revision BASE, written under INTO, and the entries the gate
    cannot judge: in BASE's tree (typhapki/fleet/gate.py `git_tree`) and in the working
    tree (`unjudged`, less what git ignores)."""
    from typhapki.fleet.gate import git_tree, unjudged
    from typhapki.fleet.nodes import shown

    repo = _git("-C", str(hiera if hiera.is_dir() else hiera.parent), "rev-parse",
                "--show-toplevel", "--show-prefix")  # fmt: skip
    if repo.returncode:
        raise UsageError(f"--base: {hiera} is not in a git repository")
    lines = repo.stdout.decode("utf-8", "surrogateescape").splitlines()
    top, prefix = lines[0], (lines[1] if len(lines) > 1 else "")
    relative = Path(prefix) / (hiera.name if not hiera.is_dir() else "")
    listed = _git("-C", top, "ls-tree", "-r", "-z", base, "--", str(relative))
    if listed.returncode:
        raise UsageError(f"--base: {shown(base, 40)}: not a revision of {top}")
    files, refused = git_tree(listed.stdout)
    for name, oid in files:
        if not name.endswith((".yaml", ".yml")):
            continue
        blob = _git("-C", top, "cat-file", "blob", oid)
        if blob.returncode:
            raise UsageError(f"--base: {shown(base, 40)}: cannot read {shown(name)} ({oid})")
        dest = into / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(blob.stdout)
    target = into / relative
    if hiera.is_dir():
        target.mkdir(parents=True, exist_ok=True)
    return target, refused + not_ignored(top, unjudged(hiera))


def not_ignored(top: str, entries: list[Unjudged]) -> list[Unjudged]:
    """The working tree's entries that git does not ignore: a developer's virtualenv or
    build output (symlinks, sockets) is no part of the change under review."""
    if not entries:
        return entries
    paths = b"".join(os.fsencode(entry.path) + b"\0" for entry in entries)
    try:
        checked = subprocess.run(["git", "-C", top, "check-ignore", "-z", "--stdin"],
                                 input=paths, capture_output=True)  # fmt: skip
    except OSError:
        return entries
    if checked.returncode not in (0, 1):  # 1: none ignored; else git could not say
        return entries
    ignored = set(checked.stdout.split(b"\0"))
    return [entry for entry in entries if os.fsencode(entry.path) not in ignored]


def has_yaml(path: Path) -> bool:
    """Whether PATH is a file, or a directory holding YAML: else nothing was before."""
    if path.is_dir():
        return any(path.glob("*.yaml")) or any(path.glob("*.yml"))
    return path.is_file()
