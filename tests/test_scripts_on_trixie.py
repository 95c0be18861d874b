"""The README's commands on a trixie machine: `bash scripts/demo.sh`, which runs
`bash scripts/setup.sh` first, inside the trixie leg's Debian 13 root (scripts/trixie-leg.sh).

On bookworm, scripts/test.sh runs the same demo as its own phase on the machine itself.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import LEG, SOURCE


def test_setup_and_demo_run_as_written_on_trixie(tmp_path: Path) -> None:
    if LEG != "trixie":
        pytest.skip("the trixie leg runs it in its Debian 13 root (scripts/trixie-leg.sh)")
    assert Path("/etc/debian_version").read_text().startswith("13."), "not a trixie root"
    # A checkout of its own: setup.sh makes .venv beside the scripts.
    checkout = tmp_path / "checkout"
    shutil.copytree(SOURCE, checkout, ignore=shutil.ignore_patterns(".venv*", "*.deb"))
    work = tmp_path / "demo"
    demo = subprocess.run(
        ["bash", "scripts/demo.sh", str(work)],
        cwd=checkout,
        capture_output=True,
        text=True,
        timeout=1200,
        stdin=subprocess.DEVNULL,
    )
    output = demo.stdout + demo.stderr
    assert demo.returncode == 0, output[-4000:]
    assert "demo done" in demo.stdout.splitlines()[-1], output[-4000:]
    setup_log = (work / "setup.log").read_text()
    assert "setup: system packages and .venv ready" in setup_log, setup_log[-2000:]
    assert (checkout / ".venv" / "bin" / "typhapki").is_file()
