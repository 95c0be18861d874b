"""Several files published together (typhapki/pki/store.py `write_files_atomic`): the
staged files of `manifests --kustomize-dir` / `--wiring-dir` are all of the new stage,
or all as they were, whichever step fails and however (an error, or a crash that
leaves the journal for the next run)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from typhapki.errors import StoreError
from typhapki.pki import store
from typhapki.pki.store import recover_files, write_files_atomic

NAMES = ("kustomization.yaml", "node.yaml", "retire.yaml", "typha-tls.yaml")


class Crash(BaseException):
    """A kill at that point: nothing in the process cleans up after it."""


def snapshot(directory: Path) -> dict[str, tuple[str, bytes, int]]:
    out = {}
    with os.scandir(directory) as entries:
        found = list(entries)
    for entry in found:
        st = entry.stat(follow_symlinks=False)
        if entry.is_symlink():
            out[entry.name] = ("link", os.readlink(entry.path).encode(), 0)
        elif entry.is_dir(follow_symlinks=False):
            out[entry.name] = ("dir", b"", st.st_mode & 0o7777)
        else:
            out[entry.name] = ("file", Path(entry.path).read_bytes(), st.st_mode & 0o7777)
    return out


@contextmanager
def failing_at(at: int | None, how: type[BaseException]) -> Iterator[list[str]]:
    """Every step write_files_atomic takes on disk, counted; the one numbered `at`
    raises `how` (an OSError, or Crash)."""
    seen: list[str] = []

    def wrap(name: str, real: Callable[..., Any]) -> Callable[..., Any]:
        def step(*args: Any, **kwargs: Any) -> Any:
            seen.append(name)
            if len(seen) - 1 == at:
                raise how(5, "Input/output error") if how is OSError else how()
            return real(*args, **kwargs)

        return step

    with (
        mock.patch.object(store, "_write_file", wrap("write", store._write_file)),
        mock.patch.object(store, "_fsync_dir", wrap("fsync", store._fsync_dir)),
        mock.patch.object(os, "link", wrap("link", os.link)),
        mock.patch.object(os, "replace", wrap("replace", os.replace)),
        mock.patch.object(os, "unlink", wrap("unlink", os.unlink)),
    ):
        yield seen


_content = st.sampled_from([b"a: 1\n", b"a: 2\n", b"b: [x]\n"])
_old = st.dictionaries(st.sampled_from(NAMES), _content, max_size=4)
_new = st.dictionaries(st.sampled_from(NAMES), _content, min_size=1, max_size=4)


def _prepare(directory: Path, old: dict[str, bytes]) -> None:
    for child in directory.iterdir():
        child.unlink()
    (directory / "unrelated.yaml").write_bytes(b"kept\n")
    for name, content in old.items():
        (directory / name).write_bytes(content)
        (directory / name).chmod(0o644)


@settings(max_examples=int(os.environ.get("FILESET_EXAMPLES", "50")), deadline=None)
@given(old=_old, new=_new, position=st.integers(0, 60), crash=st.booleans())
def test_every_failure_leaves_all_old_or_all_new(
    tmp_path_factory: pytest.TempPathFactory,
    old: dict[str, bytes],
    new: dict[str, bytes],
    position: int,
    crash: bool,
) -> None:
    directory = tmp_path_factory.mktemp("fileset")
    _prepare(directory, old)
    before = snapshot(directory)
    with failing_at(None, OSError) as steps:
        write_files_atomic(directory, new)
    after = snapshot(directory)
    assert {n: after[n][1] for n in new} == new
    _prepare(directory, old)
    if not steps:  # nothing changed: nothing written, nothing to fail
        assert after == before
        return
    at = position % len(steps)
    how: type[BaseException] = Crash if crash else OSError
    try:
        with failing_at(at, how):
            write_files_atomic(directory, new)
    except StoreError:
        assert not crash
        assert snapshot(directory) == before, steps[at]
    except Crash:
        recover_files(directory, new)  # what the next run does first
        assert snapshot(directory) in (before, after), steps[at]
    else:  # the step was one whose failure does not matter (a leftover's cleanup)
        assert {n: v for n, v in snapshot(directory).items() if n in after} == after
    # Whatever happened, the next run publishes the set whole.
    assert write_files_atomic(directory, new) is not None
    assert snapshot(directory) == after


def test_unchanged_files_are_not_rewritten(tmp_path: Path) -> None:
    files = {"kustomization.yaml": b"a\n", "node.yaml": b"b\n"}
    assert write_files_atomic(tmp_path, files) == {n: True for n in files}
    inode = (tmp_path / "node.yaml").stat().st_ino
    files["kustomization.yaml"] = b"c\n"
    assert write_files_atomic(tmp_path, files) == {"kustomization.yaml": True, "node.yaml": False}
    assert (tmp_path / "node.yaml").stat().st_ino == inode
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(files)


def test_a_directory_in_the_way_changes_nothing(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_bytes(b"old\n")
    (tmp_path / "node.yaml").mkdir()
    before = snapshot(tmp_path)
    with pytest.raises(StoreError, match=r"node\.yaml: is a directory"):
        write_files_atomic(tmp_path, {"kustomization.yaml": b"new\n", "node.yaml": b"x\n"})
    assert snapshot(tmp_path) == before
