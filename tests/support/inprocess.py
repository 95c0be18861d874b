"""Run `typhapki.cli.console.main(argv)` inside the test process, as a fresh process would see it.

A process costs about 0.3 s of interpreter and import start-up per call on this machine
(bench/ measures start-up); hundreds of calls made the suite minutes longer. What a
process gives for free is restored here by hand after every call, so no call sees what
an earlier one left behind:

- stdin is /dev/null; stdout and stderr are captured at the file-descriptor level (a
  child process the command starts writes to the same files), decoded as a pipe would;
- os.environ gets the call's overrides and is restored whole afterwards; cwd, umask,
  signal handlers, the root logger's handlers and the warning filters (Python's
  defaults, as in a fresh interpreter, not pytest's `error`) likewise;
- module-level caches the package keeps are reset (`reset_caches`);
- an exception that would end a process with a traceback becomes exit code 1 and the
  traceback on stderr, so a test that asserts "no traceback" still fails in-process.

What cannot be reproduced in-process is refused (`PROCESS_ONLY_ENV`): LD_PRELOAD
(faketime), interpreter and locale variables act only when a process starts. Such tests
use `run_cli_process` (tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from types import FrameType

# Variables read only when a process starts (the dynamic loader, the interpreter, the C
# library's locale): setting them in-process would silently test nothing.
PROCESS_ONLY_ENV = ("LD_", "FAKETIME", "PYTHON", "LC_", "LANG")


class ProcessOnly(AssertionError):
    """The call needs a fresh process: use run_cli_process."""


def reset_caches() -> None:
    """Forget what the package caches per process (a fresh process starts empty)."""
    exposition = sys.modules.get("typhapki.monitoring.exposition")
    if exposition is not None:
        exposition._modules = None  # type: ignore[attr-defined]


def _catchable_signals() -> list[signal.Signals]:
    return [s for s in signal.valid_signals() if s not in (signal.SIGKILL, signal.SIGSTOP)]


@contextlib.contextmanager
def _fd_redirected(fd: int, target: int) -> Iterator[None]:
    saved = os.dup(fd)
    try:
        os.dup2(target, fd)
        yield
    finally:
        os.dup2(saved, fd)
        os.close(saved)


@contextlib.contextmanager
def _process_state(env: Mapping[str, str], cwd: Path | None) -> Iterator[None]:
    """Everything a process would start fresh with, restored on the way out."""
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_umask = os.umask(0o022)
    os.umask(saved_umask)
    in_main_thread = threading.current_thread() is threading.main_thread()
    saved_signals = {s: signal.getsignal(s) for s in _catchable_signals()} if in_main_thread else {}
    root = logging.getLogger()
    saved_logging = (list(root.handlers), root.level, logging.root.manager.disable)
    reset_caches()
    try:
        os.environ.update(env)
        if cwd is not None:
            os.chdir(cwd)
        with warnings.catch_warnings():
            # A fresh interpreter's filters (no -W, no PYTHONWARNINGS).
            warnings.resetwarnings()
            warnings.simplefilter("default", DeprecationWarning, append=False)
            warnings.filterwarnings("ignore", category=DeprecationWarning)
            warnings.filterwarnings("default", category=DeprecationWarning, module="__main__")
            warnings.filterwarnings("ignore", category=PendingDeprecationWarning)
            warnings.filterwarnings("ignore", category=ImportWarning)
            warnings.filterwarnings("ignore", category=ResourceWarning)
            yield
    finally:
        reset_caches()
        os.environ.clear()
        os.environ.update(saved_env)
        os.chdir(saved_cwd)
        os.umask(saved_umask)
        for sig, handler in saved_signals.items():
            if handler is not None and signal.getsignal(sig) is not handler:
                signal.signal(sig, handler)
        root.handlers[:] = saved_logging[0]
        root.setLevel(saved_logging[1])
        logging.disable(saved_logging[2])


@contextlib.contextmanager
def _deadline(timeout: float, argv: Sequence[str]) -> Iterator[None]:
    """subprocess.TimeoutExpired after `timeout` seconds, as subprocess.run would raise
    (main thread only: signals are delivered there)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: FrameType | None) -> None:
        raise subprocess.TimeoutExpired(["typhapki", *argv], timeout)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, timeout)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def run_in_process(
    argv: Sequence[str], env: Mapping[str, str], timeout: float, cwd: Path | None = None
) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of `typhapki ARGV` run in this process (in `cwd`)."""
    refused = [k for k in env if k.startswith(PROCESS_ONLY_ENV)]
    if refused:
        raise ProcessOnly(f"{', '.join(refused)} act only at process start: use run_cli_process")
    from typhapki.cli.console import main

    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        open(os.devnull, "rb") as devnull,
    ):
        saved_streams = (sys.stdin, sys.stdout, sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        with (
            _process_state(env, cwd),
            _fd_redirected(0, devnull.fileno()),
            _fd_redirected(1, out.fileno()),
            _fd_redirected(2, err.fileno()),
        ):
            # New text streams on the redirected descriptors, as a process opens them.
            sys.stdin = open(0, closefd=False, encoding="utf-8")  # noqa: SIM115
            sys.stdout = open(1, "w", closefd=False, encoding="utf-8")  # noqa: SIM115
            sys.stderr = open(2, "w", closefd=False, encoding="utf-8", buffering=1)  # noqa: SIM115
            try:
                with _deadline(timeout, argv):
                    code = main(list(argv))
            except (subprocess.TimeoutExpired, KeyboardInterrupt):
                raise  # the test's time limit, or the developer's Ctrl-C
            except SystemExit as exc:  # main() catches these; a stray one ends a process
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
                if not isinstance(exc.code, int | None):
                    print(exc.code, file=sys.stderr)
            except BaseException:  # what would end a process with a traceback
                traceback.print_exc(file=sys.stderr)
                code = 1
            finally:
                for stream in (sys.stdout, sys.stderr):
                    with contextlib.suppress(Exception):
                        stream.flush()
                sys.stdin.close()
                sys.stdout.close()
                sys.stderr.close()
                sys.stdin, sys.stdout, sys.stderr = saved_streams
        out.seek(0)
        err.seek(0)
        stdout, stderr = _decoded(out.read()), _decoded(err.read())
    return code, stdout, stderr


def _decoded(data: bytes) -> str:
    """As subprocess.run(text=True) decodes a pipe (universal newlines)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8").read()
