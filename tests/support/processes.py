"""The processes the tests see: stopping the long-lived servers they start (JVMs,
PostgreSQL), and whether this run's process table is its own."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

# scripts/test.sh records the PID namespace it starts from before it runs the suite in
# a namespace of its own (unshare --pid --mount-proc, tini as its PID 1).
HOST_PIDNS_ENV = "TYPHAPKI_HOST_PIDNS"


def stop(process: subprocess.Popen[bytes], grace: float = 60) -> None:
    """SIGTERM, then SIGKILL if it is still running after `grace` seconds; reaped."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def private_process_table() -> str | None:
    """None when /proc shows only this run's processes, else why not.

    Private means: this process is in another PID namespace than the one scripts/test.sh
    started from, and /proc is that namespace's own (its `self` is this process's PID as
    the namespace numbers it). Restart status reads /proc: anywhere else a calico-typha
    that another program runs on the machine would enter a test's verdict.
    """
    host = os.environ.get(HOST_PIDNS_ENV)
    if not host:
        return f"${HOST_PIDNS_ENV} is not set: not run through scripts/test.sh"
    mine = os.readlink("/proc/self/ns/pid")
    if mine == host:
        return f"in the PID namespace scripts/test.sh started from ({host})"
    if os.readlink("/proc/self") != str(os.getpid()):
        return "/proc is another PID namespace's (mounted without --mount-proc)"
    return None


def start_named(
    directory: Path, name: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """A real process whose comm is `name`, with Calico-like arguments and `env` (None:
    this process's), returned once /proc shows it. A copy of bash in `directory` waits
    on a builtin `read` (no child process), so /proc shows exactly one process called
    `name` whose argv holds `args`."""
    exe = directory / name
    if not exe.exists():
        shutil.copy(shutil.which("bash") or "/bin/bash", exe)
    proc = subprocess.Popen(
        [str(exe), "-c", "read -t 600", name, *args], stdin=subprocess.PIPE, env=env
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{proc.pid}/comm").read_text().strip() == name:
                return proc
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    pytest.fail(f"process {proc.pid} never showed up as {name}")


@contextlib.contextmanager
def seen_alone(
    monkeypatch: pytest.MonkeyPatch, started: Sequence[subprocess.Popen[bytes]]
) -> Iterator[None]:
    """typhapki's process table shows only `started` (another job's calico-* must not
    enter a verdict); each is killed and reaped on the way out."""
    from typhapki.monitoring import processes

    pids = {p.pid for p in started}
    real = processes.list_processes
    monkeypatch.setattr(processes, "list_processes",
                        lambda names: [p for p in real(names) if p.pid in pids])  # fmt: skip
    try:
        yield
    finally:
        for proc in started:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.kill()
            proc.wait()
