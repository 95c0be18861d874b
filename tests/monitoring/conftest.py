"""Real processes named like Calico's, for restart-pending detection."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ProcessFactory = Callable[..., subprocess.Popen[bytes]]


@pytest.fixture
def calico_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessFactory]:
    """Start a real process whose comm is `name`, with Calico-like arguments.

    A copy of bash under that name waits on a builtin `read` (no child process), so
    /proc shows exactly one process called `name` whose argv holds `args`.
    """
    bin_dir = tmp_path_factory.mktemp("calico-bin")
    started: list[subprocess.Popen[bytes]] = []
    bash = shutil.which("bash")
    assert bash is not None

    def start(name: str, *args: str) -> subprocess.Popen[bytes]:
        exe = bin_dir / name
        if not exe.exists():
            shutil.copy(bash, exe)
        proc = subprocess.Popen([str(exe), "-c", "read -t 600", name, *args], stdin=subprocess.PIPE)
        started.append(proc)
        _wait_for_comm(proc.pid, name)
        return proc

    yield start
    for proc in started:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.kill()
        proc.wait()


def _wait_for_comm(pid: int, name: str) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == name:
                return
        except OSError:
            pass
        time.sleep(0.01)
    pytest.fail(f"process {pid} never showed up as {name}")
