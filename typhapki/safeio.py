"""Reading files that may be hostile: regular files only, never blocking, size-capped.

A FIFO where a key or a hiera file should be would make a plain open() wait forever
(and a Puppet run or a Facter run with it); /dev/zero would be read without end. Every
file typhapki reads goes through read_regular().
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Callable, Iterator
from pathlib import Path

from typhapki.errors import ConfigError

# Far above any certificate bundle, key or hiera file typhapki should ever meet.
DEFAULT_LIMIT = 4 * 1024 * 1024
PUPPET_SERVICE_USER = "puppet"  # Puppet's `user` default: it owns the agent's ssldir


class UnreadableFileError(ConfigError):
    """The path is not a regular file, is too large, or cannot be opened."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a directory"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def read_regular(
    path: Path,
    what: str,
    limit: int = DEFAULT_LIMIT,
    judge: Callable[[os.stat_result], str | None] | None = None,
) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes
    (and pass `judge`, which says what is wrong with its status, if anything).

    Opened with O_NONBLOCK so that a FIFO cannot block the open itself; the type is
    then checked on the open descriptor (no race with a swap of the path).
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as exc:
        raise UnreadableFileError(f"{what} {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFileError(f"{what} {path}: {_kind(st.st_mode)}, not a regular file")
        if st.st_size > limit:
            raise UnreadableFileError(f"{what} {path}: larger than {limit} bytes")
        if judge is not None and (why := judge(st)) is not None:
            raise UnreadableFileError(f"{what} {path}: {why}")
        chunks: list[bytes] = []
        size = 0
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            size += len(chunk)
            if size > limit:  # grew while we read it
                raise UnreadableFileError(f"{what} {path}: larger than {limit} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise UnreadableFileError(f"{what} {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def secret_problem(st: os.stat_result) -> str | None:
    """What makes a file unfit to hold a secret typhapki reads but does not manage (a
    client key, a token): an owner other than root, the user typhapki runs as or
    Puppet's service user (who could swap it), any permission for others, or write for
    its group. Group read is fine: Puppet keeps the agent's key 0640, owned by its
    service user `puppet`, for its group (docs/security.md)."""
    if st.st_uid not in (0, os.geteuid()) and st.st_uid != _puppet_uid():
        return (
            f"owned by uid {st.st_uid}, not root, uid {os.geteuid()} that typhapki runs as "
            f"or Puppet's service user ({PUPPET_SERVICE_USER})"
        )
    mode = st.st_mode & 0o777
    if mode & 0o007:
        return f"mode {mode:04o} lets others read or write it; chmod o= it"
    if mode & stat.S_IWGRP:
        return f"mode {mode:04o} lets its group write it; chmod g-w it"
    return None


def _puppet_uid() -> int | None:
    import pwd

    try:
        return pwd.getpwnam(PUPPET_SERVICE_USER).pw_uid
    except KeyError:
        return None


def read_secret(path: Path, what: str, limit: int = DEFAULT_LIMIT) -> bytes:
    """read_regular() of a file holding a secret: refused unless secret_problem() finds
    nothing, judged on the open descriptor."""
    return read_regular(path, what, limit, secret_problem)


@contextlib.contextmanager
def private_copies(*contents: bytes) -> Iterator[list[str]]:
    """Each content in its own 0600 file of a private directory, removed on exit: for
    `ssl`, which loads a client pair only from files, never from what typhapki read."""
    import tempfile

    with tempfile.TemporaryDirectory(prefix="typhapki-tls-") as directory:
        paths = []
        for index, data in enumerate(contents):
            path = os.path.join(directory, f"{index}.pem")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            paths.append(path)
        yield paths
