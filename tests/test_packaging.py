"""A built wheel carries everything the installed tool needs outside the repository."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def test_wheel_ships_the_ferm_templates_and_the_console_script(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("typhapki-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    templates = {Path(n).name for n in names if "/share/typhapki/ferm_templates/" in n}
    assert templates == {p.name for p in (ROOT / "ferm_templates").glob("*.j2")}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "typhapki = typhapki.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()
