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
from typing import Any

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


def _shown(proc: subprocess.Popen[bytes], name: str) -> subprocess.Popen[bytes]:
    """`proc` once /proc shows it whole: comm is `name`, and argv and the environment
    are in place. Popen returns while the kernel is still inside execve (a vfork child
    releases its parent before the new image has its argv and environment, Python 3.13
    on trixie took that path often): comm is already the new name, but cmdline and
    environ read empty, and the process would be judged as one started without TLS."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if (
                Path(f"/proc/{proc.pid}/comm").read_text().strip() == name
                and Path(f"/proc/{proc.pid}/cmdline").read_bytes()
            ):
                return proc
        time.sleep(0.01)
    proc.kill()
    proc.wait()
    pytest.fail(f"process {proc.pid} never showed up as {name}")


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
    return _shown(proc, name)


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


# The owners a test's Calico-shaped processes run as: root, tigera-operator's Typha uid
# (typhapki's default --typha-uid) and any other user (never trusted).
ROOT, TYPHA_UID, OTHER_UID = 0, 10001, 4242


def shared_bin_dir() -> Path:
    """A directory every uid can enter and execute from (pytest's own are 0700)."""
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="typhapki-calico-"))
    directory.chmod(0o755)
    return directory


def start_shaped(
    directory: Path,
    argv: Sequence[str],
    env: dict[str, str] | dict[bytes, bytes] | None = None,
    uid: int = ROOT,
) -> subprocess.Popen[bytes]:
    """A real process whose comm is argv[0]'s base name and whose argv is exactly
    `argv` (`calico component typha`, `/usr/bin/calico component felix`), owned by
    `uid`, returned once /proc shows it. A copy of bash runs the script named argv[1]
    from `directory` (its cwd): a builtin `read` that waits, no child process. An
    argv whose argv[1] is an option (`calico-node -felix`) or that is argv[0] alone
    is started by `start_named` (its argv then carries bash's `-c` script first)."""
    name = os.path.basename(argv[0])
    if len(argv) < 2 or argv[1].startswith("-"):
        exe_args: list[str] = ["-c", "read -t 600", name, *argv[1:]]
        args, cwd = [str(directory / name), *exe_args], None
    else:
        script = directory / argv[1]
        if not script.exists():  # never rewritten: another process may be reading it
            staged = directory / f".{argv[1]}.new"
            staged.write_text("read -t 600\n")
            staged.chmod(0o644)
            staged.rename(script)
        args, cwd = list(argv), directory
    exe = directory / name
    if not exe.exists():
        shutil.copy(shutil.which("bash") or "/bin/bash", exe)
        exe.chmod(0o755)
    proc = subprocess.Popen(
        args, executable=exe, stdin=subprocess.PIPE, env=env, cwd=cwd,
        user=uid if uid != os.geteuid() else None,
    )  # fmt: skip
    return _shown(proc, name)


def stop_all(started: Sequence[subprocess.Popen[bytes]]) -> None:
    """Kill and reap each of `started`."""
    for proc in started:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.kill()
        proc.wait()


def _release_shapes() -> list[Any]:
    """One release per pair of process shapes (typhapki/calico.py `RELEASES`): the
    tests of the fact and restart drift run over each shape, not each release."""
    from typhapki.calico import RELEASES

    found: dict[object, Any] = {}
    for release in RELEASES:
        found.setdefault((release.typha, release.felix), release)
    return [pytest.param(r, id=f"calico-{r.version}-shape") for r in found.values()]


SHAPED = _release_shapes()


class Node:
    """A node's Calico processes, started by a test: only they are in typhapki's
    process table while it lives (`close()` at the end)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.directory = shared_bin_dir()
        self.started: list[subprocess.Popen[bytes]] = []
        from typhapki.monitoring import processes

        real = processes.list_processes
        monkeypatch.setattr(processes, "list_processes", lambda names: [
            p for p in real(names) if p.pid in {s.pid for s in self.started}])  # fmt: skip

    def start(self, argv: tuple[str, ...], env: dict[str, str], uid: int) -> int:
        proc = start_shaped(self.directory, argv, {"PATH": "/bin", **env}, uid)
        self.started.append(proc)
        return proc.pid

    def stop(self, pid: int) -> None:
        (proc,) = [p for p in self.started if p.pid == pid]
        stop_all([proc])
        self.started.remove(proc)

    def close(self) -> None:
        stop_all(self.started)
        self.started.clear()
        shutil.rmtree(self.directory, ignore_errors=True)
