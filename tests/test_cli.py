"""typhapki/cli.py: what the root of the command line answers by itself."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from tests.conftest import run_cli


def test_version_prints_the_packages_version(tmp_path: Path) -> None:
    result = run_cli("--version")
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout == f"typhapki {version('typhapki')}\n"
    # Even with a broken node configuration file, as --help does.
    broken = tmp_path / "typhapki.yaml"
    broken.write_text("defaults: [\n")
    again = run_cli("--version", env={"TYPHAPKI_CONFIG": str(broken)})
    assert (again.returncode, again.stdout) == (0, result.stdout)
    assert "--version" in run_cli("--help").stdout
