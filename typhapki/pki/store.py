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
import re
import stat
import time
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from typhapki.errors import RefusedError, StoreError
from typhapki.record import record

DATA_LINK = "..data"
PREVIOUS_LINK = "..previous"
_TMP_PREFIX = "..tmp_"
_GENERATION_PREFIX = "..20"  # ..YYYY_..., good until the year 2100
DIR_MODE = 0o755
_GENERATION_NAME = re.compile(r"\.\.(\d{4}_\d\d_\d\d_\d\d_\d\d_\d\d\.\d{6})(?:_\d+)?")


@record(frozen=True)
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


def _write_file(path: Path, spec: FileSpec, durable: bool = True) -> None:
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
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def _token() -> str:
    """A unique part for a temporary name (what secrets.token_hex(6) returns)."""
    return os.urandom(6).hex()


def _replace_symlink(directory: Path, name: str, target: str) -> None:
    """Point directory/name at target in one atomic rename."""
    link = directory / name
    try:
        if os.readlink(link) == target:
            return
    except OSError:
        pass
    tmp = directory / f"{_TMP_PREFIX}link_{_token()}"
    os.symlink(target, tmp)
    try:
        os.replace(tmp, link)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_file_atomic(path: Path, content: bytes, mode: int = 0o644, durable: bool = True) -> bool:
    """Replace one file atomically, only when its content changes; True when written.

    A temporary file in the same directory is written, fsynced and renamed over
    `path`, so a reader (ferm, Puppet) sees the old bytes or the new, never a mix;
    on any error the old file stays as it was and the temporary file is removed.
    `durable=False` skips both fsyncs, for a file rewritten every few minutes (the
    metrics textfile): still atomic for readers, not across a power cut.
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
    tmp = path.parent / f".{path.name}.{_TMP_PREFIX}{_token()}"
    try:
        _write_file(tmp, FileSpec(content, mode), durable)
        os.replace(tmp, path)
        if durable:
            _fsync_dir(path.parent)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise StoreError(f"{exc.filename or path}: {exc.strerror or exc}") from None
    return True


# The journal of a file set being published (write_files_atomic): present only between
# the moment every new file and every backup is on disk and the last rename.
FILESET_JOURNAL = ".typhapki-fileset.json"


def _same_file(path: Path, content: bytes, mode: int) -> bool:
    """Whether `path` already holds `content` with `mode`; StoreError for what
    write_file_atomic would refuse to replace (a directory, a FIFO, a device)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise StoreError(f"{path}: is a directory")
    if not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise StoreError(f"{path}: not a regular file; refusing to replace it")
    from typhapki.safeio import UnreadableFileError, read_regular

    try:
        same = read_regular(path, "file", max(len(content), 1)) == content
    except UnreadableFileError:
        return False
    return same and stat.S_IMODE(os.stat(path).st_mode) == mode


def _roll_back_files(directory: Path, entries: Sequence[tuple[str, str, str | None]]) -> None:
    """Undo a file set's publish from its journal entries (name, temporary, backup):
    every name back to its backup (or gone, when it did not exist), temporaries removed,
    then the journal. Safe to run again after a crash inside it."""
    for name, temp, backup in entries:
        if os.path.lexists(directory / temp):  # not renamed: `name` is as it was
            os.unlink(directory / temp)
        elif backup is not None:
            # Not while the rename is undone: rename() between two links to one file
            # does nothing, and the backup would stay.
            with contextlib.suppress(FileNotFoundError):
                os.replace(directory / backup, directory / name)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / name)  # new in this set, already renamed
        if backup is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(directory / backup)
    _fsync_dir(directory)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(directory / FILESET_JOURNAL)
    _fsync_dir(directory)


def recover_files(directory: Path, names: Iterable[str]) -> bool:
    """Put `directory` back as it was before a write_files_atomic() that did not finish
    (a crash, a kill): from its journal, the old files; without one, the leftover
    temporaries of `names` removed. True when there was anything to undo."""
    import json

    from typhapki.safeio import UnreadableFileError, read_regular

    journal = directory / FILESET_JOURNAL
    text: bytes | None = None
    if os.path.lexists(journal):
        try:
            text = read_regular(journal, "file set journal", 1024 * 1024)
        except UnreadableFileError as exc:
            raise StoreError(str(exc)) from None
    undone = False
    if text is not None:
        try:
            entries = json.loads(text)["files"]
            checked = [
                (str(n), str(t), None if b is None else str(b))
                for n, t, b in entries
                if all(isinstance(x, str) and "/" not in x for x in (n, t, b or ""))
            ]
            if len(checked) != len(entries):
                raise ValueError("a name with a path")
        except (ValueError, TypeError, KeyError) as exc:
            raise StoreError(
                f"{journal}: not a journal typhapki wrote ({exc}); remove it"
            ) from None
        _roll_back_files(directory, checked)
        undone = True
    wanted = tuple(f".{name}.{_TMP_PREFIX}" for name in (*names, FILESET_JOURNAL))
    with os.scandir(directory) as found:
        leftovers = [e.name for e in found if e.name.startswith(wanted)]
    for leftover in leftovers:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / leftover)
        undone = True
    return undone


def write_files_atomic(
    directory: Path, files: Mapping[str, bytes], mode: int = 0o644
) -> dict[str, bool]:
    """Replace several files of `directory` together: afterwards every one holds its new
    content, or (on any error) every one is as it was. Returns name -> written.

    Every changed file is first written to a temporary name in `directory` and fsynced,
    and each file it replaces is hard-linked to a backup name; a journal naming them is
    then written atomically (the commit point), the temporaries renamed over the files,
    and the journal and backups removed. A failed rename rolls the renamed files back
    from their backups; a crash leaves the journal, and the next write (or
    recover_files()) rolls back from it. Raises StoreError (exit 4)."""
    import json

    try:
        recover_files(directory, files)
        changed = {n: c for n, c in files.items() if not _same_file(directory / n, c, mode)}
    except OSError as exc:
        raise StoreError(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    if not changed:
        return dict.fromkeys(files, False)
    token = _token()
    entries: list[tuple[str, str, str | None]] = []
    journal_tmp = directory / f".{FILESET_JOURNAL}.{_TMP_PREFIX}{token}"
    try:
        for name, content in changed.items():
            temp = f".{name}.{_TMP_PREFIX}{token}"
            backup = f".{name}.{_TMP_PREFIX}{token}.old"
            entries.append((name, temp, backup if os.path.lexists(directory / name) else None))
            _write_file(directory / temp, FileSpec(content, mode))
            if entries[-1][2] is not None:
                os.link(directory / name, directory / backup, follow_symlinks=False)
        _fsync_dir(directory)
        record = json.dumps({"files": entries}).encode()
        _write_file(journal_tmp, FileSpec(record, 0o600))
        os.replace(journal_tmp, directory / FILESET_JOURNAL)
        journal_tmp = directory / FILESET_JOURNAL  # ours now: removed like the rest
        _fsync_dir(directory)
    except OSError as exc:
        for _, temp, kept in entries:
            for leftover in (temp, kept):
                if leftover is not None:
                    with contextlib.suppress(OSError):
                        os.unlink(directory / leftover)
        with contextlib.suppress(OSError):
            os.unlink(journal_tmp)
        raise StoreError(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    try:
        for name, temp, _ in entries:
            os.replace(directory / temp, directory / name)
        _fsync_dir(directory)
    except OSError as exc:
        with contextlib.suppress(OSError):  # else the journal stays: the next run undoes it
            _roll_back_files(directory, entries)
        raise StoreError(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    # Done: the journal goes first, so a journal always has every backup beside it.
    with contextlib.suppress(OSError):
        os.unlink(directory / FILESET_JOURNAL)
        for *_, kept in entries:
            if kept is not None:
                os.unlink(directory / kept)
        _fsync_dir(directory)
    return {name: name in changed for name in files}


def _refuse_symlink(path: Path) -> None:
    if os.path.islink(path):
        raise RefusedError(
            f"{path}: is a symlink (to {os.readlink(path)}); typhapki writes keys only into "
            "real directories. Pass the real path, or remove the link"
        )


def ensure_dir(path: Path) -> None:
    """Create a managed directory (0755, never world-writable); refuse a symlink.

    A symlink in place of a managed directory would have keys written, and modes
    changed, wherever it points. A directory owned by another user (not root) is
    refused too: its owner could swap what typhapki writes.
    """
    _refuse_symlink(path)
    try:
        path.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
        st = os.lstat(path)
        if not stat.S_ISDIR(st.st_mode):
            raise StoreError(f"{path}: exists and is not a directory")
        if st.st_uid not in (os.geteuid(), 0):
            raise RefusedError(
                f"{path}: owned by uid {st.st_uid}, not by uid {os.geteuid()} that typhapki "
                "runs as, nor root; refusing to write keys into it"
            )
        if st.st_mode & 0o022:
            # Our own directory, writable by others: close it before writing into it.
            os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o022, follow_symlinks=False)
    except FileExistsError:
        raise StoreError(f"{path}: exists and is not a directory") from None
    except PermissionError:
        raise StoreError(f"{path}: permission denied") from None
    except OSError as exc:
        raise StoreError(f"{path}: {exc.strerror or exc}") from None


def is_generation_name(name: str | None) -> bool:
    """True for a name `publish` gives a generation (no slash, no way out of the directory)."""
    return name is not None and _GENERATION_NAME.fullmatch(name) is not None


def _generation_link(directory: Path, link: str) -> str | None:
    """Where `link` points when that is a real generation directory of `directory`."""
    try:
        target = os.readlink(directory / link)
    except OSError:
        return None
    if not is_generation_name(target):
        return None
    try:
        st = os.lstat(directory / target)
    except OSError:
        return None
    return target if stat.S_ISDIR(st.st_mode) else None


def current_generation(directory: Path) -> str | None:
    """The name of the live generation, or None when the directory is not managed yet.

    A ``..data`` that points anywhere but at a generation directory inside `directory`
    (``../../etc``, an absolute path, a symlink) counts as no generation at all.
    """
    return _generation_link(directory, DATA_LINK)


def previous_generation(directory: Path) -> str | None:
    return _generation_link(directory, PREVIOUS_LINK)


def link_problem(directory: Path) -> str | None:
    """Why ``..data`` (when present) is not a link to a generation of `directory`."""
    try:
        target = os.readlink(directory / DATA_LINK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return f"{DATA_LINK} is not a symlink"
        return None
    if current_generation(directory) is None:
        return f"{DATA_LINK} points to {target!r}, not to a generation inside {directory}"
    return None


def _generation_name(directory: Path) -> str:
    stamp = datetime.now(UTC).strftime("%Y_%m_%d_%H_%M_%S.%f")
    name = f"..{stamp}"
    suffix = 0
    while os.path.lexists(directory / name):
        suffix += 1
        name = f"..{stamp}_{suffix}"
    return name


@record
class _Prepared:
    """A generation written in full, and the links that will make it live, not yet switched."""

    directory: Path
    generation: str
    old: str | None
    keep_old: bool
    names: set[str]
    links: list[tuple[str, str]]  # (temporary link, final name), in switch order


def _temp_link(directory: Path, target: str) -> str:
    name = f"{_TMP_PREFIX}link_{_token()}"
    os.symlink(target, directory / name)
    return name


def _link_is(directory: Path, name: str, target: str) -> bool:
    try:
        return os.readlink(directory / name) == target
    except OSError:
        return False


def _prepare(directory: Path, files: Mapping[str, FileSpec], keep_old: bool) -> _Prepared:
    """Write a generation and its links beside the live ones; nothing visible changes.

    Everything that needs disk space happens here (the files, the generation, the
    temporary links), so the switch afterwards is renames only. On any error the
    partial generation and links are removed before the error propagates.
    """
    import tempfile  # here: `check` and `facts` import this module and never write

    ensure_dir(directory)
    tmp = Path(tempfile.mkdtemp(prefix=_TMP_PREFIX, dir=directory))
    prepared: _Prepared | None = None
    generation: str | None = None
    try:
        for name, spec in files.items():
            _write_file(tmp / name, spec)
        os.chmod(tmp, DIR_MODE)
        _fsync_dir(tmp)
        generation = _generation_name(directory)
        os.rename(tmp, directory / generation)
        old = current_generation(directory)
        prepared = _Prepared(directory, generation, old, keep_old, set(files), [])
        prepared.links.append((_temp_link(directory, generation), DATA_LINK))
        for name in files:
            if not _link_is(directory, name, f"{DATA_LINK}/{name}"):
                prepared.links.append((_temp_link(directory, f"{DATA_LINK}/{name}"), name))
        if keep_old and old is not None and old != generation:
            prepared.links.append((_temp_link(directory, old), PREVIOUS_LINK))
        _fsync_dir(directory)
        return prepared
    except BaseException:
        if prepared is not None:
            _discard(prepared)
        else:
            _remove_own_dir(directory / generation if generation else tmp)
        raise


def _discard(prepared: _Prepared) -> None:
    """Undo `_prepare`: remove the temporary links and the unused generation."""
    for tmp_link, _ in prepared.links:
        with contextlib.suppress(OSError):
            os.unlink(prepared.directory / tmp_link)
    _remove_own_dir(prepared.directory / prepared.generation)


def _switch(prepared: _Prepared) -> None:
    """Make a prepared generation live: renames only, ``..data`` first."""
    directory = prepared.directory
    for done, (tmp_link, final) in enumerate(prepared.links):
        try:
            os.replace(directory / tmp_link, directory / final)
        except OSError as exc:
            for rest, _ in prepared.links[done:]:
                with contextlib.suppress(OSError):
                    os.unlink(directory / rest)
            if done == 0:  # ..data not switched: the new generation was never live
                _remove_own_dir(directory / prepared.generation)
            raise _SwitchError(exc, live=done > 0) from None
    if not prepared.keep_old:
        # The old generation held something that must not come back (an exposed key):
        # no ..previous, so neither rollback nor a reader can make it live again.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / PREVIOUS_LINK)
    _fsync_dir(directory)


class _SwitchError(OSError):
    """A rename of the switch failed; `live` says whether ``..data`` had switched."""

    def __init__(self, original: OSError, live: bool) -> None:
        super().__init__(original.errno, original.strerror, original.filename)
        self.original = original
        self.live = live


def _error_text(exc: OSError, fallback: Path) -> str:
    return f"{exc.filename or fallback}: {exc.strerror or exc}"


def publish_all(
    items: Sequence[tuple[Path, Mapping[str, FileSpec]]],
    drop_previous: Collection[Path] = (),
) -> list[str]:
    """Publish several directories as one change: all of them, or none.

    Every generation is written first; only when all are complete are the links
    switched (renames, no new disk space needed), in the order given. A failure while
    writing (a full disk, a read-only file system) removes what was written and
    leaves every directory exactly as it was. A failure during the switch itself
    (renames only; practically an I/O error) says which directories were switched.

    A directory listed in `drop_previous` keeps no ``..previous``: its old generation
    is deleted (used when the old generation holds an exposed key).
    """
    prepared: list[_Prepared] = []
    try:
        for directory, files in items:
            prepared.append(_prepare(directory, files, keep_old=directory not in drop_previous))
    except BaseException as exc:
        for done in prepared:
            _discard(done)
        if isinstance(exc, StoreError | RefusedError):
            raise
        if isinstance(exc, OSError):
            where = items[len(prepared)][0]
            raise StoreError(
                f"{_error_text(exc, where)}; nothing was changed (the live files are as they were)"
            ) from None
        raise
    switched: list[Path] = []
    for done in prepared:
        try:
            try:
                _switch(done)
            except _SwitchError as failed:
                if failed.live:
                    switched.append(done.directory)
                raise failed.original from None
        except OSError as exc:
            rest = [p.directory for p in prepared if p.directory not in switched]
            for later in prepared[prepared.index(done) + 1 :]:
                _discard(later)
            made_live = ", ".join(map(str, switched)) or "none"
            raise StoreError(
                f"{_error_text(exc, done.directory)}; switched to the new generation: "
                f"{made_live}; left as they were: {', '.join(map(str, rest)) or 'none'}"
            ) from None
        switched.append(done.directory)
    for done in prepared:
        # Best effort: a generation left over is collected by the next run.
        with contextlib.suppress(OSError):
            collect_garbage(done.directory, names=done.names)
    return [p.generation for p in prepared]


def publish(directory: Path, files: Mapping[str, FileSpec], keep_previous: bool = True) -> str:
    """Make `files` the live content of `directory` in one atomic switch.

    Returns the new generation's name. The previous generation stays on disk,
    reachable through ``..previous`` (unless `keep_previous` is false); older ones
    and leftovers of killed runs go.
    """
    try:
        return publish_all([(directory, files)], () if keep_previous else (directory,))[0]
    except PermissionError as exc:
        raise StoreError(f"{exc.filename or directory}: permission denied") from None
    except OSError as exc:
        raise StoreError(_error_text(exc, directory)) from None


def collect_garbage(
    directory: Path, names: Collection[str] = (), drop_exposed: bool = True
) -> None:
    """Remove what killed or earlier runs left: temporaries and unreferenced generations.

    Call it under the set's lock. Only typhapki's own things go: names it gives
    (``..tmp_*``, ``..YYYY_MM_DD_...``), directories owned by this user on the same
    file system, holding plain files only; anything else is left alone. A previous
    generation whose key others can read is dropped with its ``..previous`` (unless
    `drop_exposed` is false: the caller's plan drops it, and says so). Links to
    ``..data/NAME`` for a NAME no longer published (not in `names`) go too, when
    `names` is given.
    """
    if os.path.islink(directory) or not os.path.isdir(directory):
        return
    previous = previous_generation(directory)
    if (
        drop_exposed
        and previous is not None
        and _generation_exposes_a_key(directory, previous) is not None
    ):
        previous = None  # a key others could read is not kept, not even for rollback
    if os.path.lexists(directory / PREVIOUS_LINK) and previous is None:
        with contextlib.suppress(OSError):
            os.unlink(directory / PREVIOUS_LINK)  # pointing out of the directory, or exposed
    keep = {current_generation(directory), previous}
    with os.scandir(directory) as scan:
        found = list(scan)
    for entry in found:
        if entry.name.startswith(_TMP_PREFIX):
            if entry.is_symlink() or not entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
            else:
                _remove_own_dir(Path(entry.path))
        elif is_generation_name(entry.name) and entry.name not in keep:
            _remove_own_dir(Path(entry.path))
        elif (
            names
            and entry.is_symlink()
            and not entry.name.startswith("..")
            and entry.name not in names
            and os.readlink(entry.path).startswith(f"{DATA_LINK}/")
        ):
            with contextlib.suppress(OSError):
                os.unlink(entry.path)


# What write_file_atomic leaves when killed before its rename: "." + NAME + "...tmp_"
# + 12 hex digits (NAME the file it was writing).
_ATOMIC_TMP = re.compile(r"\.(.+)\." + re.escape(_TMP_PREFIX) + r"[0-9a-f]{12}")


def collect_leftovers(managed: Iterable[Path], flat: Iterable[tuple[Path, str]] = ()) -> list[str]:
    """What killed runs left, collected at the start of a run (under the set's lock),
    whether or not that run goes on to change anything; returns the paths removed.

    In each `managed` directory (one that holds generations): `collect_garbage`, which
    keeps an exposed ``..previous`` here (dropping it is a change `issue` reports). In each
    `flat` (directory, prefix): the temporary files `write_file_atomic` leaves when
    killed before its rename (``.NAME...tmp_XXXXXXXXXXXX``, a copy of a staged key or
    a marker, half written or whole) whose NAME, the file it was writing, starts with
    `prefix`, when they are
    plain files or links owned by this user. Give only names written under the same
    lock, so a temporary file a live run is writing is never taken. A directory that
    is missing or a link is left alone.
    """
    removed: list[str] = []
    for directory in managed:
        before = _names(directory)
        with contextlib.suppress(OSError):
            collect_garbage(directory, drop_exposed=False)
        removed += [str(directory / n) for n in sorted(before - _names(directory))]
    for directory, prefix in flat:
        for name in sorted(_names(directory)):
            match = _ATOMIC_TMP.fullmatch(name)
            if match is None or not match[1].startswith(prefix):
                continue
            path = directory / name
            try:
                st = os.lstat(path)
                if st.st_uid != os.geteuid() or not (stat.S_ISREG(st.st_mode)
                                                      or stat.S_ISLNK(st.st_mode)):  # fmt: skip
                    continue
                os.unlink(path)
            except OSError:
                continue
            removed.append(str(path))
    return removed


def _names(directory: Path) -> set[str]:
    if os.path.islink(directory) or not os.path.isdir(directory):
        return set()
    try:
        return set(os.listdir(directory))
    except OSError:
        return set()


def _remove_own_dir(path: Path) -> bool:
    """Delete a generation-like directory that is surely ours; False when left alone.

    Never recursive and never through a link: the directory must be a real directory,
    on the same file system as its parent (not a mount point), owned by this user,
    and hold nothing but plain files and symlinks, which are unlinked relative to
    the open directory.
    """
    try:
        parent = os.lstat(path.parent)
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        with contextlib.suppress(OSError):
            if os.path.islink(path) or not os.path.isdir(path):
                os.unlink(path)  # a stray link or file under one of our names
        return False
    try:
        st = os.fstat(fd)
        if st.st_dev != parent.st_dev or st.st_uid != os.geteuid():
            return False
        with os.scandir(fd) as scan:
            entries = list(scan)
        if any(e.is_dir(follow_symlinks=False) for e in entries):
            return False
        for entry in entries:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=fd)
    except OSError:
        return False
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError:
        return False
    return True


def exposed_previous(directory: Path) -> str | None:
    """Why the previous generation (kept for rollback) must go: a key others could read.
    `collect_garbage` drops it; `check` reports it so that Puppet runs `issue`."""
    if os.path.islink(directory) or not os.path.isdir(directory):
        return None
    previous = previous_generation(directory)
    if previous is None:
        return None
    try:
        return _generation_exposes_a_key(directory, previous)
    except OSError:
        return None


def _generation_exposes_a_key(directory: Path, generation: str) -> str | None:
    """A key file in `generation` that others could read or anyone but the owner write."""
    with os.scandir(directory / generation) as entries:
        for entry in entries:
            if entry.name.endswith(".key") and entry.is_file(follow_symlinks=False):
                mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
                if mode & 0o027:
                    return f"{generation}/{entry.name} has mode {mode:04o}"
    return None


def rollback(directory: Path) -> str:
    """Make the previous generation live again (and the current one previous).

    Refused when there is no previous generation inside the directory, or when its
    key file is readable by others: rollback never makes an exposed key live.
    """
    if os.path.islink(directory):
        _refuse_symlink(directory)
    current = current_generation(directory)
    previous = previous_generation(directory)
    if previous is None:
        raise RefusedError(f"{directory}: no previous generation to roll back to")
    exposed = _generation_exposes_a_key(directory, previous)
    if exposed is not None:
        raise RefusedError(
            f"{directory}: previous generation {exposed}, readable by others: its key counts "
            "as exposed and is never made live again; run typhapki issue instead"
        )
    try:
        _replace_symlink(directory, DATA_LINK, previous)
        if current is not None:
            _replace_symlink(directory, PREVIOUS_LINK, current)
        _fsync_dir(directory)
    except OSError as exc:
        raise StoreError(f"{exc.filename or directory}: {exc.strerror or exc}") from None
    return previous


@contextlib.contextmanager
def locked(lock_path: Path, timeout: float = 120.0, create: bool = True) -> Iterator[None]:
    """Hold an exclusive flock on lock_path: Puppet and an operator never write at once.

    With `create` false, a missing directory is an error (a typo in --out must not
    create it).
    """
    if create:
        ensure_dir(lock_path.parent)
    elif not lock_path.parent.is_dir():
        raise StoreError(f"{lock_path.parent}: no such directory")
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


def generation_published_at(directory: Path, generation: str | None = None) -> datetime | None:
    """When a generation (default: the live one) was published, or None when unknown.

    The name carries the UTC time `publish` chose (``..2026_11_21_05_40_00.123456``,
    maybe with a ``_N`` suffix); a name of another shape falls back to the time the
    ``..data`` link was last switched.
    """
    name = generation if generation is not None else current_generation(directory)
    if name is None:
        return None
    match = _GENERATION_NAME.fullmatch(name)
    if match is not None:
        # Not strptime: its first call imports _strptime and compiles its regexes, a few
        # ms of every `facts` and `metrics` run (bench/bench_facts_check.py).
        year, month, day, hour, minute, seconds = match[1].split("_")
        second, micro = seconds.split(".")
        with contextlib.suppress(ValueError):
            return datetime(
                int(year), int(month), int(day), int(hour), int(minute), int(second),
                int(micro), tzinfo=UTC,
            )  # fmt: skip
    try:
        return datetime.fromtimestamp(os.lstat(directory / DATA_LINK).st_mtime, UTC)
    except OSError:
        return None
