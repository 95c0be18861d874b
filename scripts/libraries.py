"""The library set a leg runs on, as one line for the log: `python3 scripts/libraries.py`
with the leg's interpreter. scripts/test.sh prints it for its newest and debian legs,
scripts/trixie-leg-inside.sh for the trixie leg; tests/test_legs.py checks that the
line names the versions the leg claims (Python 3.13, cryptography 43, typer 0.15 and
Puppet 8.10 on trixie)."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess

DISTRIBUTIONS = (
    "typer",
    "click",
    "cryptography",
    "dnspython",
    "PyYAML",
    "Jinja2",
    "prometheus-client",
    "hypothesis",
    "pytest",
)


def line() -> str:
    """`libraries: Python X.Y.Z, typer A.B.C, ..., Puppet P.Q.R`: each distribution's
    version, "(none)" for one that is not installed, and `puppet --version`."""
    found = []
    for name in DISTRIBUTIONS:
        try:
            found.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            found.append(f"{name} (none)")
    try:
        puppet = subprocess.run(
            ["puppet", "--version"], capture_output=True, text=True, timeout=300
        ).stdout.strip()
    except OSError:
        puppet = ""
    found.append(f"Puppet {puppet or '(none)'}")
    return f"libraries: Python {platform.python_version()}, " + ", ".join(found)


if __name__ == "__main__":
    print("   " + line())
