"""The kubelet-style atomic store: generations, the ..data switch, rollback, locking."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.conftest import require, require_root
from typhapki.errors import RefusedError, StoreError
from typhapki.pki.store import (
    DATA_LINK,
    PREVIOUS_LINK,
    FileSpec,
    current_generation,
    locked,
    previous_generation,
    publish,
    publish_all,
    rollback,
)


def generations(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("..20"))


def test_publish_creates_relative_links_into_one_generation(tmp_path: Path) -> None:
    d = tmp_path / "certs"
    gen = publish(d, {"a.crt": FileSpec(b"A1"), "a.key": FileSpec(b"K1", 0o600)})
    assert os.readlink(d / DATA_LINK) == gen
    assert os.readlink(d / "a.crt") == f"{DATA_LINK}/a.crt"
    assert (d / "a.crt").read_bytes() == b"A1"
    assert stat.S_IMODE((d / gen / "a.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((d / gen / "a.crt").stat().st_mode) == 0o644
    assert stat.S_IMODE(d.stat().st_mode) == 0o755
    assert stat.S_IMODE((d / gen).stat().st_mode) == 0o755


def test_key_mode_does_not_depend_on_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        gen = publish(tmp_path / "d", {"k": FileSpec(b"secret", 0o600)})
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "d" / gen / "k").stat().st_mode) == 0o600


def test_world_writable_directory_is_tightened(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    os.chmod(d, 0o777)
    publish(d, {"x": FileSpec(b"x")})
    assert not d.stat().st_mode & 0o002


def test_second_publish_keeps_previous_and_collects_older(tmp_path: Path) -> None:
    d = tmp_path / "d"
    g1 = publish(d, {"f": FileSpec(b"1")})
    g2 = publish(d, {"f": FileSpec(b"2")})
    g3 = publish(d, {"f": FileSpec(b"3")})
    assert len({g1, g2, g3}) == 3
    assert generations(d) == sorted([g2, g3])
    assert current_generation(d) == g3
    assert previous_generation(d) == g2
    assert (d / "f").read_bytes() == b"3"
    assert (d / PREVIOUS_LINK / "f").read_bytes() == b"2"


def test_leftovers_of_killed_runs_are_removed(tmp_path: Path) -> None:
    d = tmp_path / "d"
    publish(d, {"f": FileSpec(b"1")})
    (d / "..tmp_abandoned").mkdir()
    (d / "..tmp_abandoned" / "f").write_bytes(b"half")
    publish(d, {"f": FileSpec(b"2")})
    assert not (d / "..tmp_abandoned").exists()


def test_plain_file_from_an_older_layout_is_replaced_by_a_link(tmp_path: Path) -> None:
    d = tmp_path / "d"
    d.mkdir()
    (d / "f").write_bytes(b"old plain file")
    publish(d, {"f": FileSpec(b"new")})
    assert (d / "f").is_symlink()
    assert (d / "f").read_bytes() == b"new"


def test_rollback_swaps_current_and_previous(tmp_path: Path) -> None:
    d = tmp_path / "d"
    g1 = publish(d, {"f": FileSpec(b"1")})
    g2 = publish(d, {"f": FileSpec(b"2")})
    assert rollback(d) == g1
    assert (d / "f").read_bytes() == b"1"
    assert previous_generation(d) == g2
    assert rollback(d) == g2
    assert (d / "f").read_bytes() == b"2"


def test_rollback_without_previous_is_refused(tmp_path: Path) -> None:
    d = tmp_path / "d"
    publish(d, {"f": FileSpec(b"1")})
    with pytest.raises(RefusedError, match="no previous generation"):
        rollback(d)


def test_publish_into_a_path_under_a_file_is_a_store_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    with pytest.raises(StoreError, match="file"):
        publish(tmp_path / "file" / "d", {"f": FileSpec(b"1")})


def test_links_resolve_through_a_bind_mount_at_another_path(tmp_path: Path) -> None:
    """What a hostPath mount does: the same directory seen at another path, live."""
    require_root()
    require("mount", "umount")
    d = tmp_path / "host" / "calico-typha-certs"
    publish(d, {"typha.crt": FileSpec(b"gen1")})
    mnt = tmp_path / "pod" / "calico-typha-certs"
    mnt.mkdir(parents=True)
    subprocess.run(["mount", "--bind", "-o", "ro", str(d), str(mnt)], check=True)
    try:
        assert (mnt / "typha.crt").read_bytes() == b"gen1"
        publish(d, {"typha.crt": FileSpec(b"gen2")})
        # The pod sees the switch without a remount: the links are relative.
        assert (mnt / "typha.crt").read_bytes() == b"gen2"
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_readers_never_see_a_mixed_or_partial_generation(tmp_path: Path) -> None:
    """A reader resolving ..data once always reads a matching, complete pair."""
    d = tmp_path / "d"
    publish(d, {"c": FileSpec(b"0" * 4096), "k": FileSpec(b"0" * 4096)})
    stop = threading.Event()
    bad: list[str] = []

    def reader() -> None:
        while not stop.is_set():
            try:
                gen = os.readlink(d / DATA_LINK)
                c = (d / gen / "c").read_bytes()
                k = (d / gen / "k").read_bytes()
            except FileNotFoundError:
                continue  # an old generation collected under our feet: re-resolve
            if c != k or len(c) != 4096:
                bad.append(gen)
            try:
                visible = (d / "c").read_bytes()
            except FileNotFoundError:
                continue  # resolved ..data, then that generation was collected: re-resolve
            if len(visible) != 4096 or len(set(visible)) != 1:
                bad.append("partial visible file")

    threads = [threading.Thread(target=reader) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        for i in range(1, 150):
            body = str(i % 10).encode() * 4096
            publish(d, {"c": FileSpec(body), "k": FileSpec(body)})
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert bad == []


def test_lock_is_exclusive_between_processes(tmp_path: Path) -> None:
    lock = tmp_path / "out" / ".lock"
    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from typhapki.pki.store import locked\n"
        "with locked(Path(sys.argv[1])):\n"
        "    print('held', flush=True)\n"
        "    time.sleep(1.5)\n"
    )
    with subprocess.Popen(
        [sys.executable, "-c", script, str(lock)], stdout=subprocess.PIPE, text=True
    ) as proc:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "held"
        with pytest.raises(StoreError, match="held the lock"), locked(lock, timeout=0.3):
            pass
        proc.wait(timeout=10)
    # Released when the holder exits: taking it now succeeds.
    with locked(lock, timeout=5):
        pass


def _entries(d: Path) -> dict[str, str]:
    return {
        p.name: (os.readlink(p) if p.is_symlink() else "dir" if p.is_dir() else "file")
        for p in d.iterdir()
    }


def test_publish_all_is_all_or_nothing_on_any_error(tmp_path: Path) -> None:
    """A failure while writing the second directory (here an impossible uid, which is
    not even an OSError) leaves both directories exactly as they were, no temporaries."""
    a, b = tmp_path / "a", tmp_path / "b"
    publish(a, {"x": FileSpec(b"a1")})
    publish(b, {"k": FileSpec(b"b1", 0o600)})
    before = (_entries(a), _entries(b))
    with pytest.raises(OverflowError):
        publish_all([(a, {"x": FileSpec(b"a2")}), (b, {"k": FileSpec(b"b2", 0o600, uid=2**40)})])
    assert (_entries(a), _entries(b)) == before
    assert (a / "x").read_bytes() == b"a1" and (b / "k").read_bytes() == b"b1"


def test_a_failed_switch_says_exactly_what_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    publish(a, {"x": FileSpec(b"a1")})
    publish(b, {"x": FileSpec(b"b1")})
    real_replace = os.replace

    def failing(src: str | Path, dst: str | Path) -> None:
        if Path(dst) == b / DATA_LINK:
            raise OSError(5, "Input/output error", str(dst))
        real_replace(src, dst)

    monkeypatch.setattr("typhapki.pki.store.os.replace", failing)
    with pytest.raises(StoreError) as err:
        publish_all([(a, {"x": FileSpec(b"a2")}), (b, {"x": FileSpec(b"b2")})])
    monkeypatch.undo()
    assert f"switched to the new generation: {a}; left as they were: {b}" in str(err.value)
    assert (a / "x").read_bytes() == b"a2"
    assert (b / "x").read_bytes() == b"b1"
    assert not [p for p in b.iterdir() if p.name.startswith("..tmp")]
