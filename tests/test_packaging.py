"""A built wheel carries everything the installed tool needs outside the repository,
and its metadata is what every build backend of the legs accepts without a warning."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from tests.conftest import INSTALLED_LEGS, LEG, SOURCE

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
    # A Debian leg builds with its release's hatchling (no isolation: what is installed),
    # as dh-python does for the .deb; the newest leg with the newest from PyPI.
    isolation = ["--no-build-isolation"] if LEG in INSTALLED_LEGS else []
    pip = [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", *isolation]
    build = subprocess.run(
        [*pip, "-w", str(tmp_path), str(SOURCE)], check=True, capture_output=True, timeout=600
    )
    # No deprecated metadata: nothing the backend says mentions a deprecation.
    log = (build.stdout + build.stderr).decode(errors="replace")
    assert "deprecat" not in log.lower(), log[-2000:]
    (wheel,) = tmp_path.glob("typhapki-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("/METADATA")))
    headers = metadata.decode().split("\n\n", 1)[0].splitlines()
    assert "License-Expression: Apache-2.0" in headers
    assert not [h for h in headers if h.startswith(("License:", "Classifier: License ::"))]
    templates = {Path(n).name for n in names if "/share/typhapki/ferm_templates/" in n}
    assert templates == {p.name for p in (SOURCE / "ferm_templates").glob("*.j2")}
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    scripts = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "typhapki = typhapki.cli.console:script" in scripts


def test_dependencies_have_bookworm_floors_and_no_caps() -> None:
    project = tomllib.loads((SOURCE / "pyproject.toml").read_text())
    deps = project["project"]["dependencies"]
    floors = {}
    for dep in deps:
        match = re.fullmatch(r"([A-Za-z0-9_.-]+)>=([0-9.]+)", dep)
        assert match, f"{dep!r}: a floor and nothing else (no cap, no marker)"
        floors[match[1].lower()] = match[2]
    assert floors == BOOKWORM_FLOORS


def test_the_license_is_an_spdx_expression_for_a_backend_both_releases_have() -> None:
    project = tomllib.loads((SOURCE / "pyproject.toml").read_text())
    # PEP 639: the SPDX string, no table and no License classifier (setuptools stops
    # building those after 2027-02-18). hatchling takes it from 1.12 (bookworm's), and
    # debian/control builds with it.
    assert project["project"]["license"] == "Apache-2.0"
    assert not [c for c in project["project"]["classifiers"] if c.startswith("License ::")]
    assert project["build-system"] == {
        "requires": ["hatchling>=1.12"],
        "build-backend": "hatchling.build",
    }
    control = (SOURCE / "debian" / "control").read_text()
    assert "python3-hatchling," in control and "python3-setuptools" not in control
