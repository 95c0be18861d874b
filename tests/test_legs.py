"""Each CI leg tests the library set it claims to (scripts/test.sh sets TYPHAPKI_EXPECT_LIBS).

- debian: Debian bookworm's python3 packages from /usr/lib/python3/dist-packages, the
  installed .deb's typhapki (same files as the checkout) and /usr/bin/typhapki;
- newest: the newest PyPI releases (at least the versions below), typhapki from the
  checkout.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import (
    DEBIAN_DIST_PACKAGES,
    INSTALLED_COMMAND,
    LEG,
    ROOT,
    SOURCE,
    typhapki_cmd,
)

# distribution -> (module, bookworm's version)
DEBIAN = {
    "typer": ("typer", "0.7.0"),
    "click": ("click", "8.1.3"),
    "cryptography": ("cryptography", "38.0.4"),
    "dnspython": ("dns", "2.3.0"),
    "Jinja2": ("jinja2", "3.1.2"),
    "PyYAML": ("yaml", "6.0"),
    "prometheus-client": ("prometheus_client", "0.16.0"),
}
# The newest releases on PyPI when these were written: the newest leg runs at least these.
NEWEST_AT_LEAST = {
    "typer": (0, 29),
    "cryptography": (50, 0),
    "dnspython": (2, 9),
    "Jinja2": (3, 1, 6),
    "PyYAML": (6, 0, 3),
    "prometheus-client": (0, 26),
}


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split("."):
        digits = "".join(c for c in part if c.isdigit()) if part[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
        if not part.isdigit():
            break
    return tuple(parts)


def _leg() -> str:
    if not LEG:
        msg = "TYPHAPKI_EXPECT_LIBS is unset: scripts/test.sh names the leg"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return LEG


def _digests(package: Path) -> dict[str, str]:
    return {
        str(p.relative_to(package)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(package.rglob("*.py"))
    }


def test_the_leg_uses_the_library_versions_it_claims() -> None:
    leg = _leg()
    for dist, (module_name, debian_version) in DEBIAN.items():
        if leg == "newest" and dist not in NEWEST_AT_LEAST:
            continue  # click: typer >= 0.28 carries its own copy
        version = importlib.metadata.version(dist)
        module = importlib.import_module(module_name)
        where = Path(str(module.__file__)).resolve()
        if leg == "debian":
            assert version == debian_version, (dist, version)
            assert where.is_relative_to(DEBIAN_DIST_PACKAGES), (dist, where)
        else:
            assert _release(version) >= NEWEST_AT_LEAST[dist], (dist, version)
            assert not where.is_relative_to(DEBIAN_DIST_PACKAGES), (dist, where)


def test_the_leg_runs_the_typhapki_it_claims() -> None:
    import typhapki

    leg = _leg()
    where = Path(typhapki.__file__).resolve().parent
    if leg == "debian":
        assert where == DEBIAN_DIST_PACKAGES / "typhapki"
        assert typhapki_cmd() == [str(INSTALLED_COMMAND)]
        assert not (ROOT / "typhapki").exists(), "the Debian leg runs from a copy without it"
        # The installed package is this checkout's code, not an older build.
        assert _digests(where) == _digests(SOURCE / "typhapki")
        status = subprocess.run(
            ["dpkg-query", "-W", "-f", "${Status} ${Version}", "typhapki"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert status == f"install ok installed {typhapki.__version__}"
        # /usr/bin/typhapki is Debian's interpreter, no venv in between.
        shebang = INSTALLED_COMMAND.read_text().splitlines()[0]
        assert shebang in ("#!/usr/bin/python3", "#! /usr/bin/python3"), shebang
    else:
        assert where == (ROOT / "typhapki").resolve()
        assert Path(typhapki_cmd()[0]).parent == Path(sys.executable).parent
