"""What a killed run leaves in OUT is collected by the next run, even one that changes
nothing (issue 30, class 7; docs/security.md, "The store: what is inside OUT").

The runs are killed for real: a child process runs typhapki with os.rename,
os.replace and os.symlink wrapped so that the N-th call sends SIGKILL to itself, the
way a power cut or the OOM killer ends a run between two steps.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli
from typhapki.pki.layout import STAGING_DIR, SetPaths
from typhapki.pki.settings import RoleName
from typhapki.pki.store import DATA_LINK, PREVIOUS_LINK, current_generation, previous_generation

KILLED_AT = """
import os, signal, sys
target, count = int(sys.argv[1]), [0]
def wrap(call):
    def killing(*args, **kwargs):
        count[0] += 1
        if count[0] == target:
            os.kill(os.getpid(), signal.SIGKILL)
        return call(*args, **kwargs)
    return killing
os.rename, os.replace, os.symlink = wrap(os.rename), wrap(os.replace), wrap(os.symlink)
from typhapki.cli.console import main
sys.exit(main(sys.argv[2:]))
"""


def killed_run(at: int, *args: str | Path) -> int:
    """typhapki ARGS in a child killed at the `at`-th rename, replace or symlink; its
    exit status (-SIGKILL when it was killed)."""
    proc = subprocess.run(
        [sys.executable, "-c", KILLED_AT, str(at), *map(str, args)],
        capture_output=True,
        timeout=120,
    )
    return proc.returncode


def leftovers(out: Path) -> list[str]:
    """Everything in OUT a finished run would not have left there."""
    found = []
    paths = SetPaths(out)
    for directory in paths.managed_dirs:
        if not directory.is_dir():
            continue
        live = {current_generation(directory), previous_generation(directory)}
        for entry in directory.iterdir():
            name = entry.name
            if name.startswith("..tmp_") or (name.startswith("..20") and name not in live):
                found.append(str(entry))
    for directory in (out, paths.staging):
        if directory.is_dir():
            found += [str(e) for e in directory.iterdir() if "...tmp_" in e.name]
    return found


def live_bytes(out: Path) -> dict[str, bytes]:
    paths = SetPaths(out)
    return {
        str(p.relative_to(out)): p.read_bytes()
        for d in paths.managed_dirs
        for p in sorted(d.iterdir())
        if not p.name.startswith("..")
    }


@pytest.fixture
def shipped(tmp_path: Path, ca_dir: Path) -> Path:
    """A second valid set of the same CA: what `install --from` publishes over OUT."""
    source = tmp_path / "shipped"
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", source).returncode == 0
    return source


@settings(
    max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(at=st.integers(1, 12))
@example(at=1)  # the first generation renamed into place: nothing live has moved yet
def test_a_killed_install_leaves_nothing_after_the_next_issue(
    issued: Path, shipped: Path, ca_dir: Path, at: int
) -> None:
    before = live_bytes(issued)
    status = killed_run(at, "install", "--from", shipped, "--out", issued)
    if status != -signal.SIGKILL:  # fewer calls than `at`: the install finished
        assert status == 0
    after_kill = live_bytes(issued)
    left = leftovers(issued)
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    assert result.returncode == 0, result.stderr
    assert leftovers(issued) == [], left
    if after_kill == before:
        # The kill came before any switch: the next run has nothing to change, and
        # collects all the same.
        assert live_bytes(issued) == before
        assert "reissued" not in result.stdout and "issued" not in result.stdout.split()
    for directory in SetPaths(issued).managed_dirs:
        assert (directory / DATA_LINK).is_symlink()
        assert not (directory / PREVIOUS_LINK).exists() or previous_generation(directory)


def test_a_killed_request_leaves_no_copy_of_the_staged_key(issued: Path, ca_dir: Path) -> None:
    """request killed between writing its temporary key and renaming it: the copy goes
    at the start of the next run, an issue that changes nothing."""
    staging = issued / STAGING_DIR
    assert killed_run(1, "request", "--out", issued, "--role", "felix") == -signal.SIGKILL
    copies = [p for p in staging.iterdir() if "...tmp_" in p.name]
    assert copies and b"PRIVATE KEY" in copies[0].read_bytes()
    before = live_bytes(issued)
    result = run_cli("issue", "--ca-dir", ca_dir, "--out", issued)
    assert result.returncode == 0, result.stderr
    assert live_bytes(issued) == before
    assert list(staging.iterdir()) == []


def test_a_staged_key_already_live_is_collected(issued: Path, tmp_path: Path) -> None:
    """install --cert killed after publishing the staged key, before removing it: the
    staged copy of the live key goes, and the next request makes a new key."""
    staged = issued / STAGING_DIR / "calico-node.key"
    staged.parent.mkdir(mode=0o700)
    live_key = SetPaths(issued).key(RoleName.FELIX)
    staged.write_bytes(live_key.read_bytes())
    staged.chmod(0o600)
    csr = tmp_path / "csr.pem"
    result = run_cli("request", "--out", issued, "--role", "felix", "--csr-out", csr)
    assert result.returncode == 0, result.stderr
    assert staged.read_bytes() != live_key.read_bytes()


def test_what_is_not_typhapkis_own_is_left_alone(issued: Path, ca_dir: Path) -> None:
    """Names typhapki never gives, and a temporary name outside the lock's files (a
    --csr-out another command is writing into OUT), stay."""
    keep = [
        issued / "notes.txt",
        issued / ".csr.pem...tmp_0123456789ab",
        issued / STAGING_DIR / "README",
        SetPaths(issued).bundle_dir / "tmp_not_ours",
    ]
    (issued / STAGING_DIR).mkdir(mode=0o700)
    for path in keep:
        path.write_bytes(b"x")
    planted = [
        issued / "..restart-typha...tmp_0123456789ab",  # for OUT/.restart-typha
        issued / STAGING_DIR / ".typha.key...tmp_abcdefabcdef",
    ]
    for path in planted:
        path.write_bytes(b"half")
    assert run_cli("issue", "--ca-dir", ca_dir, "--out", issued).returncode == 0
    assert all(p.exists() for p in keep)
    assert not any(p.exists() for p in planted)


def test_an_exposed_previous_is_still_dropped_and_said(issued: Path, ca_dir: Path) -> None:
    """The collection at the start keeps an exposed ..previous for the plan, whose
    step drops it and says so: no change goes unreported."""
    role_dir = SetPaths(issued).role_dir(RoleName.FELIX)
    again = ("issue", "--ca-dir", ca_dir, "--out", issued, "--key-type", "ecdsa-p384")
    assert run_cli(*again).returncode == 0
    previous = role_dir / os.readlink(role_dir / PREVIOUS_LINK)
    (previous / "calico-node.key").chmod(0o644)
    (role_dir / "..tmp_killed").mkdir()
    result = run_cli(*again)
    assert result.returncode == 0, result.stderr
    assert "dropped" in result.stdout, result.stdout
    assert not previous.exists() and not (role_dir / PREVIOUS_LINK).exists()
    assert leftovers(issued) == []
