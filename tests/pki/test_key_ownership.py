"""Key ownership for a non-root Typha: numeric uid/gid, no name needed on the node.

`fsGroup` does not apply to hostPath volumes, and a group name fails on nodes without
it. What works (docs/kubernetes.md): the key owned by the numeric uid/gid the Typha
container runs as. Proved with a real process running under those ids (`setpriv`),
for ids that have no name on this host.
"""

from __future__ import annotations

import grp
import os
import pwd
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import require, require_root, run_cli
from typhapki.pki.layout import SetPaths
from typhapki.pki.settings import RoleName


def _unnamed_id(start: int) -> int:
    """The first id from `start` that is neither a user nor a group name here."""
    uid = start
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            try:
                grp.getgrgid(uid)
            except KeyError:
                return uid
        uid += 1


@pytest.fixture
def world_traversable() -> Iterator[Path]:
    # pytest's tmp_path is 0700 root: another uid could not even reach the key.
    path = Path(tempfile.mkdtemp(prefix="typhapki-owner-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def _read_as(uid: int, gid: int, path: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "cat", str(path)],
        capture_output=True,
        timeout=30,
    )


def test_numeric_owner_reads_the_key_others_do_not(world_traversable: Path, ca_dir: Path) -> None:
    require_root()
    require("setpriv")
    uid = _unnamed_id(10001)
    other = _unnamed_id(uid + 1)
    out = world_traversable / "out"
    result = run_cli(
        "issue", "--ca-dir", ca_dir, "--out", out, "--role", "typha",
        "--key-owner", str(uid), "--key-group", str(uid),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    key = SetPaths(out).key(RoleName.TYPHA)
    st = os.stat(key)  # through the ..data symlinks, as the pod sees it
    assert (st.st_uid, st.st_gid, st.st_mode & 0o777) == (uid, uid, 0o600)

    as_typha = _read_as(uid, uid, key)
    assert as_typha.returncode == 0, as_typha.stderr
    assert as_typha.stdout == key.read_bytes()
    assert b"PRIVATE KEY" in as_typha.stdout
    # Anyone else is refused, even in the group (the key stays 0600):
    assert _read_as(other, uid, key).returncode != 0
    refused = _read_as(other, other, key)
    assert refused.returncode != 0
    assert b"Permission denied" in refused.stderr


def test_default_key_is_root_only(world_traversable: Path, ca_dir: Path) -> None:
    """Why the docs need this at all: by default a non-root Typha cannot read its key."""
    require_root()
    require("setpriv")
    uid = _unnamed_id(10001)
    out = world_traversable / "out"
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", out, "--role", "typha").returncode == 0
    assert _read_as(uid, uid, SetPaths(out).key(RoleName.TYPHA)).returncode != 0
