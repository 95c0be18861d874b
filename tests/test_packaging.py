"""A built wheel carries everything the installed tool needs outside the repository."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.conftest import LEG, SOURCE

# Debian bookworm's packages: the floors, and what the .deb runs on.
BOOKWORM_FLOORS = {
    "cryptography": "38",
    "dnspython": "2.3",
    "jinja2": "3.1.2",
    "prometheus-client": "0.16",
    "pyyaml": "6.0",
    "typer": "0.7",
}


def test_wheel_ships_the_ferm_templates_and_the_console_script(tmp_path: Path) -> None:
    # The Debian leg builds with bookworm's setuptools 66 (no isolation: what is installed).
    isolation = ["--no-build-isolation"] if LEG == "debian" else []
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation]
    subprocess.run(
        [*pip, "-w", str(tmp_path), str(SOURCE)], check=True, capture_output=True, timeout=600
    )
    (wheel,) = tmp_path.glob("typhapki-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    templates = {Path(n).name for n in names if "/share/typhapki/ferm_templates/" in n}
    assert templates == {p.name for p in (SOURCE / "ferm_templates").glob("*.j2")}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    assert "typhapki = typhapki.entry:script" in zipfile.ZipFile(wheel).read(entry_points).decode()


def test_dependencies_have_bookworm_floors_and_no_caps() -> None:
    project = tomllib.loads((SOURCE / "pyproject.toml").read_text())
    deps = project["project"]["dependencies"]
    floors = {}
    for dep in deps:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", dep)
        assert match, f"{dep!r}: a floor and nothing else (no cap, no marker)"
        floors[match[1].lower()] = match[2]
    assert floors == BOOKWORM_FLOORS
    # setuptools 66 (bookworm) rejects a PEP 639 license string.
    assert not isinstance(project["project"]["license"], str)
    (requires,) = project["build-system"]["requires"]
    assert requires == "setuptools>=66"
