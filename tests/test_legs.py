"""Each CI leg tests the library set it claims to (scripts/test.sh sets TYPHAPKI_EXPECT_LIBS).

- debian: Debian bookworm's python3 packages from /usr/lib/python3/dist-packages, the
  installed .deb's typhapki (same files as the checkout) and /usr/bin/typhapki;
- trixie: the same inside a Debian 13 root, on trixie's python3 packages and Puppet 8;
- newest: the newest PyPI releases (at least the versions below), typhapki from the
  checkout.

docs/interop.md's table "Library sets CI proves" is these sets; a test keeps it so.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
import platform
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import (
    DEBIAN_DIST_PACKAGES,
    INSTALLED_COMMAND,
    INSTALLED_LEGS,
    LEG,
    ROOT,
    SOURCE,
    typhapki_cmd,
)

# distribution -> its module
MODULES = {
    "typer": "typer",
    "click": "click",
    "cryptography": "cryptography",
    "dnspython": "dns",
    "Jinja2": "jinja2",
    "PyYAML": "yaml",
    "prometheus-client": "prometheus_client",
}
# leg -> the Debian release's packages it runs on: exact versions, with Python's and
# Puppet's major.minor.
DEBIAN_RELEASES = {
    "debian": {
        "release": "bookworm (12)",
        "Python": "3.11",
        "typer": "0.7.0",
        "click": "8.1.3",
        "cryptography": "38.0.4",
        "dnspython": "2.3.0",
        "Jinja2": "3.1.2",
        "PyYAML": "6.0",
        "prometheus-client": "0.16.0",
        "Puppet": "7.23",
    },
    "trixie": {
        "release": "trixie (13)",
        "Python": "3.13",
        "typer": "0.15.2",
        "click": "8.1.8",
        "cryptography": "43.0.0",
        "dnspython": "2.7.0",
        "Jinja2": "3.1.6",
        "PyYAML": "6.0.2",
        "prometheus-client": "0.21.1",
        "Puppet": "8.10",
    },
}
# bookworm's set: the floors of pyproject.toml (tests/test_packaging.py).
DEBIAN = {dist: (MODULES[dist], DEBIAN_RELEASES["debian"][dist]) for dist in MODULES}
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


def _library_line() -> dict[str, str]:
    """The line the leg prints for its log (scripts/libraries.py, run by scripts/test.sh
    and scripts/trixie-leg-inside.sh with the leg's interpreter): name -> version."""
    printed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "libraries.py")],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.strip()
    assert printed.startswith("libraries: Python "), printed
    entries = printed.removeprefix("libraries: ").split(", ")
    return dict(entry.rsplit(" ", 1) for entry in entries)


def test_the_leg_uses_the_library_versions_it_claims() -> None:
    """What the leg imports, and the library line it prints for its log, are the set it
    claims: on trixie, Python 3.13, cryptography 43, typer 0.15 and Puppet 8.10."""
    leg = _leg()
    for dist, module_name in MODULES.items():
        if leg == "newest" and dist not in NEWEST_AT_LEAST:
            continue  # click: typer >= 0.28 carries its own copy
        version = importlib.metadata.version(dist)
        module = importlib.import_module(module_name)
        where = Path(str(module.__file__)).resolve()
        if leg in INSTALLED_LEGS:
            assert version == DEBIAN_RELEASES[leg][dist], (dist, version)
            assert where.is_relative_to(DEBIAN_DIST_PACKAGES), (dist, where)
        else:
            assert _release(version) >= NEWEST_AT_LEAST[dist], (dist, version)
            assert not where.is_relative_to(DEBIAN_DIST_PACKAGES), (dist, where)
    printed = _library_line()
    assert printed["Python"] == platform.python_version()
    for dist in MODULES:
        if leg == "newest" and dist not in NEWEST_AT_LEAST:
            continue  # click, as above
        assert printed[dist] == importlib.metadata.version(dist), (dist, printed)
    if leg in INSTALLED_LEGS:
        expected = DEBIAN_RELEASES[leg]
        assert platform.python_version().startswith(expected["Python"] + ".")
        assert printed["Puppet"].startswith(expected["Puppet"] + "."), printed


def _interop_table() -> dict[str, dict[str, str]]:
    """docs/interop.md's "Library sets CI proves": leg -> column -> cell."""
    text = (ROOT / "docs" / "interop.md").read_text()
    section = text.split("\n## Library sets CI proves\n", 1)[1].split("\n## ", 1)[0]
    rows = [
        [cell.strip().strip("`") for cell in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("|") and not re.fullmatch(r"\|[-| ]+\|", line.strip())
    ]
    header, *body = rows
    return {row[0]: dict(zip(header[1:], row[1:], strict=True)) for row in body}


def test_the_interop_table_is_what_the_legs_assert() -> None:
    table = _interop_table()
    assert set(table) == {*INSTALLED_LEGS, "newest"}
    for leg in INSTALLED_LEGS:
        assert table[leg] == DEBIAN_RELEASES[leg], leg
    newest = table["newest"]
    for dist in MODULES:
        floor = NEWEST_AT_LEAST.get(dist)
        cell = ">= " + ".".join(map(str, floor)) if floor else "(typer's own)"
        assert newest[dist] == cell, (dist, newest[dist])


def test_the_leg_runs_the_typhapki_it_claims() -> None:
    import typhapki

    leg = _leg()
    where = Path(typhapki.__file__).resolve().parent
    if leg in INSTALLED_LEGS:
        assert where == DEBIAN_DIST_PACKAGES / "typhapki"
        assert typhapki_cmd() == [str(INSTALLED_COMMAND)]
        assert not (ROOT / "typhapki").exists(), f"the {leg} leg runs from a copy without it"
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


class _Item:
    """As much of a pytest.Item as tests/conftest.py's `once_legs` reads."""

    nodeid = "tests/x.py::test_x"

    def __init__(self, *marks: pytest.MarkDecorator) -> None:
        self.marks = [m.mark for m in marks]

    def get_closest_marker(self, name: str) -> pytest.Mark | None:
        return next((m for m in self.marks if m.name == name), None)


def _legs(*marks: pytest.MarkDecorator) -> tuple[str, ...] | None:
    from typing import cast

    from tests.conftest import once_legs

    return once_legs(cast(pytest.Item, _Item(*marks)))


def test_once_names_the_legs_that_run_a_heavy_test() -> None:
    assert _legs() is None  # every leg
    assert _legs(pytest.mark.once) == ("debian",)
    assert _legs(pytest.mark.once("trixie")) == ("trixie",)
    assert _legs(pytest.mark.once("debian", "trixie")) == ("debian", "trixie")
    assert _legs(pytest.mark.once("newest")) == ("newest",)
    with pytest.raises(pytest.UsageError, match="bookworm"):
        _legs(pytest.mark.once("bookworm"))  # a release, not a leg: it would never run
