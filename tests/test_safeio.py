"""read_regular: regular files only, no blocking on FIFOs, a size cap."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from typhapki.safeio import UnreadableFileError, read_regular


def test_reads_a_regular_file(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"abc")
    assert read_regular(path, "file") == b"abc"


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    path = tmp_path / "fifo"
    os.mkfifo(path)
    with pytest.raises(UnreadableFileError, match="FIFO"):
        read_regular(path, "key")


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_a_device_is_refused(device: str) -> None:
    with pytest.raises(UnreadableFileError, match="character device"):
        read_regular(Path(device), "cert")


def test_the_size_cap(tmp_path: Path) -> None:
    path = tmp_path / "big"
    path.write_bytes(b"x" * 11)
    assert read_regular(path, "f", limit=11) == b"x" * 11
    with pytest.raises(UnreadableFileError, match="larger than 10 bytes"):
        read_regular(path, "f", limit=10)


def test_a_directory_and_a_missing_file_name_the_path(tmp_path: Path) -> None:
    with pytest.raises(UnreadableFileError, match="directory"):
        read_regular(tmp_path, "hiera")
    with pytest.raises(UnreadableFileError, match=str(tmp_path / "nope")):
        read_regular(tmp_path / "nope", "hiera")
