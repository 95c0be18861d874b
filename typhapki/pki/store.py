"""Atomic on-disk sets, published the way the kubelet publishes Secret volumes.

A managed directory looks like this::

    calico-typha-certs/
      ..2026_11_21_05_40_00.123456/   one generation, written completely before use
      ..2026_10_01_08_00_00.654321/   the previous generation, kept for rollback
      ..data -> ..2026_11_21_05_40_00.123456
      ..previous -> ..2026_10_01_08_00_00.654321
      typha.crt -> ..data/typha.crt
      typha.key -> ..data/typha.key

A new generation is written into a private temporary directory, fsynced, renamed to
its timestamped name, and made live by one atomic rename of the ``..data`` symlink,
so a reader sees either the old certificate and key or the new ones, never a mix and
never a half-written file. Every link is relative, so the directory works the same
when a pod mounts it by hostPath at another path.

Callers hold `locked()` on the set while publishing: one writer at a time.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from typhapki.errors import RefusedError, StoreError

DATA_LINK = "..data"
PREVIOUS_LINK = "..previous"
_TMP_PREFIX = "..tmp_"
_GENERATION_PREFIX = "..20"  # ..YYYY_..., good until the year 2100
DIR_MODE = 0o755


@dataclass(frozen=True)
class FileSpec:
    """One file of a generation: its bytes and who may read them."""

    content: bytes
    mode: int = 0o644
    uid: int | None = None
    gid: int | None = None


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: Path, spec: FileSpec) -> None:
    # Created 0600 and owned by us first, so a key is never readable by others,
    # not even between open() and chmod().
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        if spec.uid is not None or spec.gid is not None:
            os.fchown(
                fd, -1 if spec.uid is None else spec.uid, -1 if spec.gid is None else spec.gid
            )
        os.fchmod(fd, spec.mode)
        view = memoryview(spec.content)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_symlink(directory: Path, name: str, target: str) -> None:
    """Point directory/name at target in one atomic rename."""
    link = directory / name
    try:
        if os.readlink(link) == target:
            return
    except OSError:
        pass
    tmp = directory / f"{_TMP_PREFIX}link_{secrets.token_hex(6)}"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_file_atomic(path: Path, content: bytes, mode: int = 0o644) -> bool:
    """Replace one file atomically, only when its content changes; True when written.

    A temporary file in the same directory is written, fsynced and renamed over
    `path`, so a reader (ferm, Puppet) sees the old bytes or the new, never a mix;
    on any error the old file stays as it was and the temporary file is removed.
    """
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{path}: is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        # A FIFO or device where the file belongs: never opened (a FIFO would block).
        raise StoreError(f"{path}: not a regular file; refusing to replace it")
    if st is not None:
        from typhapki.safeio import UnreadableFileError, read_regular

        try:
            same = read_regular(path, "file", max(len(content), 1)) == content
        except UnreadableFileError:
            same = False  # larger, unreadable or not a regular file behind a link
        if same and stat.S_IMODE(os.stat(path).st_mode) == mode:
            return False
    tmp = path.parent / f".{path.name}.{_TMP_PREFIX}{secrets.token_hex(6)}"
    try:
        _write_file(tmp, FileSpec(content, mode))
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StoreError(f"{exc.filename or path}: {exc.strerror or exc}") from None
    return True


def ensure_dir(path: Path) -> None:
    """Create a managed directory (0755, never world-writable)."""
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        if not path.is_dir():
            raise StoreError(f"{path}: exists and is not a directory")
        mode = path.stat().st_mode
        if mode & 0o002:
            os.chmod(path, mode & ~0o002 & 0o7777)
    except FileExistsError:
        raise StoreError(f"{path}: exists and is not a directory") from None
    except PermissionError:
        raise StoreError(f"{path}: permission denied") from None
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from None


def current_generation(directory: Path) -> str | None:
    """The name of the live generation, or None when the directory is not managed yet."""
    try:
        return os.readlink(directory / DATA_LINK)
    except OSError:
        return None


def previous_generation(directory: Path) -> str | None:
    try:
        return os.readlink(directory / PREVIOUS_LINK)
    except OSError:
        return None


def _generation_name(directory: Path) -> str:
    stamp = datetime.now(UTC).strftime("%Y_%m_%d_%H_%M_%S.%f")
    name = f"..{stamp}"
    suffix = 0
    while (directory / name).exists():
        suffix += 1
        name = f"..{stamp}_{suffix}"
    return name


def publish(directory: Path, files: Mapping[str, FileSpec]) -> str:
    """Make `files` the live content of `directory` in one atomic switch.

    Returns the new generation's name. The previous generation stays on disk,
    reachable through ``..previous``; older ones and leftovers of killed runs go.
    """
    ensure_dir(directory)
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=directory))
        for name, spec in files.items():
            _write_file(tmp / name, spec)
        os.chmod(tmp, DIR_MODE)
        _fsync_dir(tmp)
        generation = _generation_name(directory)
        os.rename(tmp, directory / generation)
        _fsync_dir(directory)

        old = current_generation(directory)
        _replace_symlink(directory, DATA_LINK, generation)  # the moment of truth
        for name in files:
            _replace_symlink(directory, name, f"{DATA_LINK}/{name}")
        if old is not None and old != generation:
            _replace_symlink(directory, PREVIOUS_LINK, old)
        _fsync_dir(directory)
        _collect_garbage(directory, keep={generation, old}, names=set(files))
    except PermissionError as exc:
        raise StoreError(f"{exc.filename or directory}: permission denied") from None
    except OSError as exc:
        if isinstance(exc, StoreError):
            raise
        raise StoreError(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    return generation


def _collect_garbage(directory: Path, keep: set[str | None], names: set[str]) -> None:
    """Remove generations other than `keep`, temporaries of killed runs, stale links."""
    for entry in os.scandir(directory):
        if entry.name.startswith(_TMP_PREFIX) or (
            entry.name.startswith(_GENERATION_PREFIX) and entry.name not in keep
        ):
            _remove_tree(Path(entry.path))
        elif (
            entry.is_symlink()
            and not entry.name.startswith("..")
            and entry.name not in names
            and os.readlink(entry.path).startswith(f"{DATA_LINK}/")
        ):
            os.unlink(entry.path)


def _remove_tree(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
        return
    for child in path.iterdir():
        _remove_tree(child)
    path.rmdir()


def rollback(directory: Path) -> str:
    """Make the previous generation live again (and the current one previous)."""
    current = current_generation(directory)
    previous = previous_generation(directory)
    if previous is None or not (directory / previous).is_dir():
        raise RefusedError(f"{directory}: no previous generation to roll back to")
    try:
        _replace_symlink(directory, DATA_LINK, previous)
        if current is not None:
            _replace_symlink(directory, PREVIOUS_LINK, current)
        _fsync_dir(directory)
    except OSError as exc:
        raise StoreError(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    return previous


@contextlib.contextmanager
def locked(lock_path: Path, timeout: float = 120.0) -> Iterator[None]:
    """Hold an exclusive flock on lock_path: Puppet and an operator never write at once."""
    ensure_dir(lock_path.parent)
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        raise StoreError(f"{lock_path}: cannot open lock file: {exc.strerror or exc}") from None
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise StoreError(f"{lock_path}: cannot lock: {exc.strerror}") from None
                if time.monotonic() >= deadline:
                    raise StoreError(
                        f"{lock_path}: another typhapki run has held the lock for {timeout:.0f}s"
                    ) from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
