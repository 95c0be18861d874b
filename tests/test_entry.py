"""typhapki/entry.py: a plain `check`, `facts` or `metrics` line starts without typer.

The console script itself runs (the Debian leg: /usr/bin/typhapki from the .deb), with
PYTHONPROFILEIMPORTTIME, Python's `-X importtime` for any process: its report names
every module the process imported.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli

# The libraries only typer's path (and --hiera, ferm, DNS) may pull in.
HEAVY = frozenset({"typer", "click", "rich", "jinja2", "dns"})


def imported(stderr: str) -> set[str]:
    """Top-level names of the modules an importtime report lists."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            names.add(name.split(".")[0])
    return names


def _node_config(tmp_path: Path, out: Path) -> dict[str, str]:
    """A node configuration file as Puppet writes it: the fleet's usual case."""
    path = tmp_path / "typhapki.yaml"
    path.write_text(
        f"defaults:\n  out: {out}\n  role: both\ncommands:\n  check:\n    quiet: true\n"
    )
    return {"TYPHAPKI_CONFIG": str(path)}


@pytest.mark.parametrize("with_config", [False, True])
@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--ca-dir", "{ca}"],
        ["check", "-q", "--trust", "{ca}/typhaca.crt", "--days", "365"],
        ["facts", "--ca-dir", "{ca}", "--renew-before", "30d"],
        ["metrics", "--no-probe", "--role", "typha"],
    ],
)
def test_the_routine_commands_import_no_typer(
    issued: Path, ca_dir: Path, tmp_path: Path, argv: list[str], with_config: bool
) -> None:
    args = [a.format(ca=ca_dir) for a in argv]
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    if with_config:
        env.update(_node_config(tmp_path, issued))
    else:
        args += ["--out", str(issued)]
    result = run_cli(*args, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = imported(result.stderr)
    assert "cryptography" in seen  # the report is read: the work's own imports are there
    assert seen & HEAVY == set()


def test_anything_else_goes_to_typer(issued: Path) -> None:
    """--help is typer's: the same report shows typer when it is used."""
    result = run_cli("check", "--help", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0
    assert "typer" in imported(result.stderr)
