"""Stopping the long-lived servers the tests start (JVMs, PostgreSQL)."""

from __future__ import annotations

import subprocess


def stop(process: subprocess.Popen[bytes], grace: float = 60) -> None:
    """SIGTERM, then SIGKILL if it is still running after `grace` seconds; reaped."""
    process.terminate()
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
