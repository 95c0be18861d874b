"""typhapki/cli/console.py: a plain `check`, `facts` or `metrics` line starts without typer.

The console script itself runs (the Debian leg: /usr/bin/typhapki from the .deb), with
PYTHONPROFILEIMPORTTIME, Python's `-X importtime` for any process: its report names
every module the process imported.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import run_cli_process
from typhapki.cli import console as entry

# The libraries only typer's path (and --hiera, ferm, DNS) may pull in.
HEAVY = frozenset({"typer", "click", "rich", "jinja2", "dns"})
# Modules the routine commands must not add to what `import cryptography.x509` loads
# (the floor of bench/bench_facts_check.py): each cost start-up time, none is needed.
# dataclasses (with inspect, ast, dis): typhapki/record.py; the serialization package
# (its SSH support imports dataclasses and the ciphers): typhapki/pki/x509compat.py;
# idna: the FQDN is asked with bytes (typhapki/settings/pki.py); the others are
# imported where files are written.
SLOW = frozenset(
    {
        "dataclasses",
        "inspect",
        "typing",
        "tempfile",
        "shutil",
        "secrets",
        "encodings.idna",
        "cryptography.hazmat.primitives.serialization",
        "cryptography.hazmat.primitives.serialization.ssh",
    }
)


def imported(stderr: str) -> set[str]:
    """Top-level names of the modules an importtime report lists."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and line.count("|") == 2:
            name = line.rsplit("|", 1)[1].strip()
            names.add(name.split(".")[0])
    return names


def imported_modules(stderr: str) -> set[str]:
    """Every module an importtime report lists, by its full name."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in stderr.splitlines()
        if line.startswith("import time:") and line.count("|") == 2
    }


@pytest.fixture(scope="module")
def floor_modules() -> set[str]:
    """What `import cryptography.x509` loads, on the library set under test."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", "import cryptography.x509"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    modules = imported_modules(proc.stderr)
    assert "cryptography.x509" in modules
    return modules


@pytest.fixture(scope="module")
def prometheus_modules() -> set[str]:
    """What `import prometheus_client` loads, on the library set under test: `metrics`
    imports the whole library (typhapki/monitoring/exposition.py)."""
    env = {**os.environ, "PYTHONPROFILEIMPORTTIME": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", "import prometheus_client"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    )  # fmt: skip
    return imported_modules(proc.stderr)


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
    issued: Path,
    ca_dir: Path,
    tmp_path: Path,
    argv: list[str],
    with_config: bool,
    floor_modules: set[str],
    prometheus_modules: set[str],
) -> None:
    args = [a.format(ca=ca_dir) for a in argv]
    env = {"PYTHONPROFILEIMPORTTIME": "1"}
    if with_config:
        env.update(_node_config(tmp_path, issued))
    else:
        args += ["--out", str(issued)]
    result = run_cli_process(*args, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    seen = imported(result.stderr)
    assert "cryptography" in seen  # the report is read: the work's own imports are there
    assert seen & HEAVY == set()
    added = imported_modules(result.stderr) - floor_modules
    assert "typhapki.record" in added  # typhapki's own modules count
    if argv[0] == "metrics":  # prometheus_client's own imports are its cost
        assert "prometheus_client" in added
        added -= prometheus_modules
    else:
        assert "prometheus_client" not in seen
    assert added & SLOW == set()


def test_anything_else_goes_to_typer(issued: Path) -> None:
    """--help is typer's: the same report shows typer when it is used."""
    result = run_cli_process("check", "--help", env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0
    assert "typer" in imported(result.stderr)


# -- both paths answer alike: the same exit code and the same error lines -------------

OPTIONS = ["--role", "--ca-dir", "--trust", "--days", "--renew-before", "--key-type",
           "--key-mode", "--typha-cn", "--felix-uri-san", "--cluster"]  # fmt: skip
VALUES = ["typha", "both", "x", "", "0", "90", "400d", "30d", "rsa-1024", "0640", "0666",
          "/nonexistent", "--out"]  # fmt: skip


@st.composite
def routine_lines(draw: st.DrawFn, out: str) -> list[str]:
    command = draw(st.sampled_from(["check", "facts", "metrics"]))
    argv = [command, "--out", out, "--no-probe"] if command != "check" else [command]
    if command == "check":
        argv += ["--out", out]
    for _ in range(draw(st.integers(0, 4))):
        argv += [draw(st.sampled_from(OPTIONS)), draw(st.sampled_from(VALUES))]
    if draw(st.booleans()):
        argv.append("-q" if command == "check" else "--no-probe")
    return argv


def _main(argv: list[str], fast: bool) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    env = {"TYPHAPKI_NO_FAST_PATH": "" if fast else "1", "TYPHAPKI_CONFIG": ""}
    with (
        mock.patch.dict(os.environ, env),
        mock.patch.object(sys, "argv", ["typhapki", *argv]),
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(out),
    ):
        code = entry.main()
    return code, out.getvalue(), err.getvalue()


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_fast_and_typer_paths_answer_alike(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    base = tmp_path_factory.mktemp("set")
    argv = data.draw(routine_lines(str(base / "out")))
    fast, slow = _main(argv, fast=True), _main(argv, fast=False)
    assert (fast[0], fast[2]) == (slow[0], slow[2]), argv
    if argv[0] == "check":
        assert fast[1] == slow[1], argv
    if argv[0] == "facts":  # the same fact but for the time it was made
        facts = [json.loads(o) for o in (fast[1], slow[1])]
        for fact in facts:
            fact["typhapki"].pop("generated_at", None)
        assert facts[0] == facts[1], argv


MAIN_AS_SCRIPT = "import sys\nfrom typhapki.cli.console import main\nsys.exit(main())\n"


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--ca-dir", "{ca}", "--out", "{out}"],
        ["check", "--ca-dir", "{ca}", "--out", "{out}", "--days", "1", "--renew-before", "2d"],
        ["check", "--out", "{out}/missing"],
        ["facts", "--ca-dir", "{ca}", "--out", "{out}"],
        ["metrics", "--no-probe", "--out", "{out}"],
        ["check", "--no-such-option"],
        ["--version"],
    ],
)
def test_the_console_script_ends_as_main_returns(
    issued: Path, ca_dir: Path, argv: list[str]
) -> None:
    """script() leaves the process without Python's finalization after the fast path:
    the exit code and every byte of output are what main() returning gives."""
    args = [a.format(ca=ca_dir, out=issued) for a in argv]
    script = run_cli_process(*args)
    env = {**os.environ, "TYPHAPKI_CONFIG": ""}
    plain = subprocess.run(
        [sys.executable, "-c", MAIN_AS_SCRIPT, *args],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert script.returncode == plain.returncode, script.stderr
    if argv[0] == "metrics":  # the same metrics but for the time they were taken
        stamp = re.compile(r"\d\.\d+e\+09")
        assert stamp.sub("T", script.stdout) == stamp.sub("T", plain.stdout)
    elif argv[0] == "facts":  # the same fact but for the time it was made
        facts = [json.loads(p.stdout)["typhapki"] for p in (script, plain)]
        for fact in facts:
            fact.pop("generated_at", None)
        assert facts[0] == facts[1]
    else:
        assert script.stdout == plain.stdout
    assert script.stderr == plain.stderr
    assert script.stdout or script.stderr  # something was written, and flushed


@pytest.mark.parametrize("command", ["check", "facts"])
def test_output_to_a_reader_that_went_away_exits_141_quietly(
    issued: Path, ca_dir: Path, command: str
) -> None:
    """Whether the command's write meets the closed pipe (typhapki/cli/boundary.py `guarded`)
    or the flush at the end does (`check`'s one line stays in the buffer)."""
    from tests.conftest import typhapki_cmd

    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [*typhapki_cmd(), command, "--ca-dir", str(ca_dir), "--out", str(issued)],
            stdout=write, stderr=subprocess.PIPE, env={**os.environ, "TYPHAPKI_CONFIG": ""},
            timeout=120,
        )  # fmt: skip
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (141, b"")
