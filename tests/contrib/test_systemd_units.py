"""contrib/systemd: the metrics service and timer pass `systemd-analyze verify`."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.conftest import ROOT, require, typhapki_cmd

UNITS = ROOT / "contrib" / "systemd"
INSTALLED = "/usr/bin/typhapki"


def _verify(directory: Path) -> subprocess.CompletedProcess[str]:
    require("systemd-analyze")
    units = sorted(str(p) for p in directory.glob("typhapki-metrics.*"))
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *units],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _copy(tmp_path: Path, mutate: str = "") -> Path:
    """The units, ExecStart pointed at this checkout's typhapki (where the package puts
    /usr/bin/typhapki): verify insists that the command exists."""
    [exe] = [c for c in typhapki_cmd() if c.endswith("typhapki")]
    for unit in UNITS.glob("typhapki-metrics.*"):
        text = unit.read_text().replace(f"ExecStart={INSTALLED} ", f"ExecStart={exe} ")
        (tmp_path / unit.name).write_text(text + mutate * unit.name.endswith(".service"))
    return tmp_path


def test_units_verify_cleanly(tmp_path: Path) -> None:
    service = (UNITS / "typhapki-metrics.service").read_text()
    assert f"ExecStart={INSTALLED} metrics " in service
    proc = _verify(_copy(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr  # not even a warning


def test_verify_catches_a_mistake(tmp_path: Path) -> None:
    proc = _verify(_copy(tmp_path, mutate="ExecStartPre=relative/path\n"))
    assert proc.returncode != 0 or proc.stderr.strip(), "verify would catch nothing"


def test_timer_refreshes_every_few_minutes() -> None:
    timer = (UNITS / "typhapki-metrics.timer").read_text()
    assert "OnUnitActiveSec=5min" in timer and "WantedBy=timers.target" in timer
