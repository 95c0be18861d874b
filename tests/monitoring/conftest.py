"""Real processes named like Calico's, for restart-pending detection."""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Iterator

import pytest

from tests.support.processes import start_named

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
