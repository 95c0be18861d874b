"""Every usage error is one `typhapki: error:` line naming where the value came from.

From any source (a flag, the node configuration file's `defaults:` or `commands:`,
hiera's `typha:` mapping), on typer's path (typhapki/cli/console.py,
typhapki/cli/typer_app.py) as on
the fast path (typhapki/cli/fast_path.py): what click refuses is one line too, never its
usage block; a key or value holding a newline, an escape sequence or NUL is escaped
(typhapki/errors.py `one_line`), and a path holding one is refused.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conftest import CliResult, assert_one_line_error, run_cli
from typhapki.errors import EXIT_USAGE, one_line, unprintable

# Characters that do not print as themselves: line breaks YAML and Python know, a tab,
# an escape sequence's start, DEL, C1's NEL, a bidi override; NUL only from files
# (no argument of a process can hold one).
CONTROLS = ["\n", "\r", "\t", "\x1b", "\x7f", "\x85", "\u2028", "\u202e"]
FILE_CONTROLS = [*CONTROLS, "\x00"]


def assert_contract(result: CliResult, *needles: str) -> str:
    """Exit 2, one line naming what it must, every character of it printable."""
    assert_one_line_error(result, EXIT_USAGE, *needles)
    assert result.stderr.endswith("\n") and result.stderr[:-1].isprintable(), result.stderr
    assert "Usage:" not in result.stderr + result.stdout
    return result.stderr[:-1]


class Case(NamedTuple):
    argv: list[str | Path]
    config: str | None  # the node configuration file's text
    hiera: str | None
    needles: tuple[str, ...]


HIERA = """kubernetes::clusters:
  main:
    prod:
      cluster_nodes: [node1.example.org]
      typha:
        {key}: {value}
"""


def build(kind: str, source: str, command: str, control: str, base: Path) -> Case:
    """One bad value of `kind` holding `control`, placed at `source`."""
    config = base / "typhapki.yaml"
    section = f"commands.{command}" if source == "commands" else "defaults"

    def in_file(key: str, value: str) -> str:
        body = f"{json.dumps(key)}: {json.dumps(value)}"
        if source == "commands":
            return f"commands:\n  {command}:\n    {body}\n"
        return f"defaults:\n  {body}\n"

    argv: list[str | Path] = [command, "--ca-dir", base / "ca"]
    shown = one_line(control)
    if kind == "path":
        value = f"{base}/o{control}ut"
        if source == "flag":
            return Case([*argv, "--out", value], None, None, ("(from --out)", shown))
        return Case(argv, in_file("out", value), None, (f"{config}: {section}.out", shown))
    if kind == "choice":
        value = f"fe{control}lix"
        argv += ["--out", base / "out"]
        if source == "flag":
            return Case([*argv, "--role", value], None, None, ("--role", shown))
        where = f"role {value!r} (from {config}: {section}.role)"
        return Case(argv, in_file("role", value), None, (one_line(where), "expected typha"))
    if kind == "key":
        key = f"da{control}ys"
        argv += ["--out", base / "out"]
        if source == "flag":
            return Case([*argv, f"--{key}", "3"], None, None, ("No such option: --da",))
        return Case(argv, in_file(key, "3"), None, (one_line(f"{config}: {section}.{key}"),))
    if kind == "number":
        argv += ["--out", base / "out"]
        if source == "flag":
            return Case([*argv, "--days", f"3{control}0"], None, None, ("--days",))
        return Case(argv, in_file("days", f"3{control}0"), None, (f"{section}.days", shown))
    # hiera: a key or a value of the cluster's typha: mapping
    hiera = base / "hiera.yaml"
    argv += ["--out", base / "out", "--hiera", hiera, "--cluster", "prod"]
    if kind == "hiera value" and not (control < " " or control == "\x7f"):
        control = "\x1b"  # a CN refuses C0 controls and DEL (pki/settings.py validate_cn)
    shown = one_line(control)
    key, value = {
        "hiera value": ("typha_cn", f"a{control}b"),
        "hiera path": ("ferm_output", f"/etc/ferm/ferm.d/10{control}typha"),
    }.get(kind, (f"ty{control}", "x"))
    text = HIERA.format(key=json.dumps(key), value=json.dumps(value))
    where = f"{hiera}:6: kubernetes::clusters.main.prod.typha."
    if kind == "hiera path":
        # The ferm rule's file is the firewall's to read: `check` and `issue` never
        # stop on it (typhapki/inventory/hiera.py, the readers), `ferm` does.
        argv = ["ferm", "--hiera", hiera, "--cluster", "prod"]
    return Case(argv, None, text, (where, shown))


SOURCED = {  # the sources each kind of value can come from
    "path": ("flag", "defaults", "commands"),
    "choice": ("flag", "defaults", "commands"),
    "key": ("flag", "defaults", "commands"),
    "number": ("flag", "defaults", "commands"),
    "hiera key": ("hiera",),
    "hiera value": ("hiera",),
    "hiera path": ("hiera",),
}


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(sorted(SOURCED)),
    pick=st.integers(0, 2),
    command=st.sampled_from(["check", "issue"]),
    control=st.sampled_from(FILE_CONTROLS),
    fast=st.booleans(),
)
def test_a_usage_error_from_any_source_is_one_line_naming_it(
    kind: str,
    pick: int,
    command: str,
    control: str,
    fast: bool,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    source = SOURCED[kind][pick % len(SOURCED[kind])]
    if source == "flag" and control == "\x00":
        control = "\x1b"  # a process's arguments cannot hold NUL
    base = tmp_path_factory.mktemp("node")
    case = build(kind, source, command, control, base)
    env = {"TYPHAPKI_CONFIG": "", "TYPHAPKI_NO_FAST_PATH": "" if fast else "1"}
    if case.config is not None:
        path = base / "typhapki.yaml"
        path.write_text(f"version: 1\n{case.config}")
        path.chmod(0o600)
        env["TYPHAPKI_CONFIG"] = str(path)
    if case.hiera is not None:
        (base / "hiera.yaml").write_text(case.hiera)
    line = assert_contract(run_cli(*case.argv, env=env), *case.needles)
    assert "the node configuration file" not in line  # the file and key, not a vague word
    assert not (base / "out").exists() and not list(base.glob("o*ut"))  # nothing written


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["issue", "--days"], ("'--days'",)),
        (["issue", "--ca-dir", "x"], ("Missing option '--out'", "(typhapki issue --help)")),
        (["issue", "--dayz", "3"], ("--dayz", "(typhapki issue --help)")),
        (["check", "--out"], ("'--out'",)),
        (["no-such-command"], ("no-such-command",)),
        (["ca", "init", "--ca-dir", "c", "--force=x"], ("'--force'",)),
        (["fleet", "ready", "--cluster", "c"], ("Missing option", "typhapki fleet ready --help")),
    ],
)
def test_what_typer_refuses_is_one_line_too(argv: list[str], needles: tuple[str, ...]) -> None:
    """click's usage block (Usage:, Try --help, Error:) was three lines and more."""
    assert_contract(run_cli(*argv, env={"TYPHAPKI_CONFIG": ""}), *needles)


def test_a_number_the_file_hands_typer_is_refused_naming_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A number the node configuration file hands typer (click's default_map) is read
    by the number parser, as a flag's is (typhapki/numbers.py `option_number`), not by
    click's int(): the line names the file's key, not the flag click would."""
    from typhapki.cli.boundary import Call, CliState, dispatch
    from typhapki.cli.typer_app import app

    config = tmp_path / "typhapki.yaml"
    state = CliState(origins={"issue": {"days": f"{config}: defaults.days"}})
    call = app(
        args=["issue", "--out", str(tmp_path / "out")],
        prog_name="typhapki",
        standalone_mode=False,
        default_map={"issue": {"days": "\u0663"}},  # int() takes an Arabic-Indic 3
        obj=state,
    )
    assert isinstance(call, Call)
    assert dispatch(call) == 2
    line = capsys.readouterr().err
    assert line.startswith(f"typhapki: error: days '\u0663' (from {config}: defaults.days): ")
    assert "--days" not in line
    assert not (tmp_path / "out").exists()


@given(st.text(max_size=30))
@settings(max_examples=300)
def test_one_line_keeps_what_prints_and_escapes_the_rest(text: str) -> None:
    shown = one_line(text)
    assert shown.isprintable()
    assert (shown == text) is text.isprintable()
    assert (unprintable(text) is None) is text.isprintable()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["inspect", "/etc/ssl/a\nb.pem"], "paths '/etc/ssl/a\\nb.pem' (from PATHS)"),
        (["lint-hiera", "--offline", "x\x1by.yaml"], "files 'x\\x1by.yaml' (from FILES)"),
        (["ferm", "--hiera", "h\r.yaml", "--cluster", "c"], "hiera 'h\\r.yaml' (from --hiera)"),
        (["rollback", "--out", "/srv/\u2028pki"], "out '/srv/\\u2028pki' (from --out)"),
    ],
)
def test_a_path_argument_with_a_control_character_is_refused(argv: list[str], needle: str) -> None:
    line = assert_contract(run_cli(*argv, env={"TYPHAPKI_CONFIG": ""}), needle)
    assert "control character" in line
