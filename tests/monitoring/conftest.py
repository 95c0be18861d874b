"""Real processes named like Calico's, for restart-pending detection."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.support.processes import ROOT, shared_bin_dir, start_named, start_shaped, stop_all

ProcessFactory = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def calico_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessFactory]:
    """Start a real process whose comm is `name`, with Calico-like arguments
    (tests/support/processes.py `start_named`); stopped after the test."""
    bin_dir = tmp_path_factory.mktemp("calico-bin")
    started: list[subprocess.Popen[bytes]] = []

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        proc = start_named(bin_dir, name, *args)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.kill()
        proc.wait()


@pytest.fixture
def shaped_process() -> Iterator[ProcessFactory]:
    """Start a real process with exactly the argv given (any Calico release's shape,
    tests/support/processes.py `start_shaped`), as `uid` (root by default); stopped
    after the test."""
    import shutil

    bin_dir = shared_bin_dir()
    started: list[subprocess.Popen[bytes]] = []

    def start(
        *argv: str, env: dict[str, str] | None = None, uid: int = ROOT
    ) -> subprocess.Popen[bytes]:
        proc = start_shaped(bin_dir, argv, env, uid)
        started.append(proc)
        return proc

    yield start
    stop_all(started)
    shutil.rmtree(bin_dir, ignore_errors=True)
