"""Reading files that may be hostile: regular files only, never blocking, size-capped.

A FIFO where a key or a hiera file should be would make a plain open() wait forever
(and a Puppet run or a Facter run with it); /dev/zero would be read without end. Every
file typhapki reads goes through read_regular().
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from typhapki.errors import ConfigError

# Far above any certificate bundle, key or hiera file typhapki should ever meet.
DEFAULT_LIMIT = 4 * 1024 * 1024


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


def read_regular(path: Path, what: str, limit: int = DEFAULT_LIMIT) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes.

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
