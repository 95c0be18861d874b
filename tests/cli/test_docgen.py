"""The man page and bash completion generated from the command tree (typhapki.cli.docgen),
rendered by man-db and driven by bash-completion as a user's shell would.

Every leg checks the generator on its own typer; the Debian leg also checks the files
the .deb installed (/usr/share/man/man1/typhapki.1.gz, the completion)."""

from __future__ import annotations

import gzip
import os
import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import INSTALLED_LEGS, LEG, SOURCE, require
from typhapki import options
from typhapki.cli import docgen

INSTALLED_MAN = Path("/usr/share/man/man1/typhapki.1.gz")
INSTALLED_COMPLETION = Path("/usr/share/bash-completion/completions/typhapki")
BASH_COMPLETION = Path("/usr/share/bash-completion/bash_completion")


def render(page: Path) -> str:
    """`man -l` as a user runs it; groff's warnings (bad roff) fail the test."""
    require("man")
    proc = subprocess.run(
        ["man", "--warnings", "-l", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "MANWIDTH": "100", "MANPAGER": "cat", "LC_ALL": "C.UTF-8"},
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "", proc.stderr
    return proc.stdout


def complete(script: Path, line: str) -> list[str]:
    """COMPREPLY for the command line `line` (completing its last word)."""
    require("bash")
    if not BASH_COMPLETION.exists():
        require("bash-completion-is-missing")  # skips locally, fails under CI
    words = line.split(" ")
    bash = (
        f"source {BASH_COMPLETION}; source {script}; "
        'COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
        'COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}; _typhapki; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    proc = subprocess.run(
        ["bash", "-c", bash, "bash", *words], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


def complete_equals(script: Path, line: str) -> list[str]:
    """COMPREPLY for `... --option=VALUE` as readline hands it over: COMP_WORDBREAKS
    makes `=` a word of its own, and COMP_LINE has no spaces around it."""
    require("bash")
    if not BASH_COMPLETION.exists():
        require("bash-completion-is-missing")
    head, _, value = line.partition("=")
    *words, option = head.split(" ")
    bash = (
        f"source {BASH_COMPLETION}; source {script}; "
        'COMP_LINE="$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); '
        'COMP_POINT=${#COMP_LINE}; _typhapki; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    argv = ["bash", "-c", bash, "bash", line, *words, option, "=", value]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [w for w in proc.stdout.splitlines() if w]


def leaf_commands() -> list[str]:
    return [" ".join(c.path) for c in docgen.commands()]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("docgen")
    assert docgen.main(["man", str(base / "typhapki.1")]) == 0
    assert docgen.main(["bash", str(base / "typhapki")]) == 0
    return base / "typhapki.1", base / "typhapki"


def check_man_page(page: Path) -> None:
    text = render(page)
    assert text.startswith("TYPHAPKI(1)")
    for cmd in leaf_commands():
        assert f"typhapki {cmd}" in text, cmd
    for command in docgen.commands():
        for opt in command.options:
            assert opt.names[0] in text, (command.path, opt.names)
    assert "EXIT STATUS" in text


def check_completion(script: Path) -> None:
    assert "check" in complete(script, "typhapki ch")
    assert complete(script, "typhapki ca ") == ["init", "--help"]
    assert complete(script, "typhapki check --ro") == ["--role"]
    assert complete(script, "typhapki check --out /tmp --role ") == ["typha", "felix", "both"]
    assert "--stage" in complete(script, "typhapki rotate-ca --st")
    assert complete(script, "typhapki ferm --mode ") == ["strict", "relaxed"]
    assert complete(script, "typhapki ferm --port ") == []
    for cmd in leaf_commands():
        assert "--help" in complete(script, f"typhapki {cmd} --"), cmd
    assert complete(script, "typhapki --v") == ["--version"]
    # Every option that takes one of a fixed set of words offers them, as `--opt WORD`
    # and as `--opt=WORD`, on every command that has it; request and sign hold one role.
    offered = set()
    for command in docgen.commands():
        path = " ".join(command.path)
        for opt in command.options:
            values = docgen.choices(path, opt.names[0])
            if values is None:
                continue
            offered.add(opt.names[0])
            assert complete(script, f"typhapki {path} {opt.names[0]} ") == list(values), path
            first = values[-1][:1]
            want = [v for v in values if v.startswith(first)]
            got = complete_equals(script, f"typhapki {path} {opt.names[0]}={first}")
            assert got == want, (path, opt.names[0], got)
    assert offered == set(docgen.CHOICES)
    assert complete(script, "typhapki ferm --dns-gate ") == ["enforce", "warn"]
    assert complete(script, "typhapki request --role ") == ["typha", "felix"]


def test_generated_man_page_renders_every_command_and_option(generated: tuple[Path, Path]) -> None:
    check_man_page(generated[0])


def test_generated_completion_completes_commands_options_and_values(
    generated: tuple[Path, Path],
) -> None:
    check_completion(generated[1])


def test_generation_is_deterministic(generated: tuple[Path, Path]) -> None:
    assert docgen.man_page() == generated[0].read_text()
    assert docgen.bash_completion() == generated[1].read_text()


def _installed_leg() -> None:
    if LEG not in INSTALLED_LEGS:
        pytest.skip("the installed package's files are checked in the Debian leg")


def test_installed_man_page_is_the_generated_one_and_man_finds_it() -> None:
    _installed_leg()
    text = gzip.decompress(INSTALLED_MAN.read_bytes()).decode()
    assert text == docgen.man_page()
    check_man_page(INSTALLED_MAN)
    found = subprocess.run(["man", "-w", "typhapki"], capture_output=True, text=True, timeout=60)
    assert found.stdout.strip() == str(INSTALLED_MAN), found.stderr


def test_installed_completion_is_the_generated_one() -> None:
    _installed_leg()
    assert INSTALLED_COMPLETION.read_text() == docgen.bash_completion()
    check_completion(INSTALLED_COMPLETION)


def test_the_options_doc_is_generated_from_the_declaration() -> None:
    """docs/options.md, each option's marks, and the node file's refusals agree."""
    from typhapki import options
    from typhapki.cli import nodeconfig
    from typhapki.cli.docgen import options_doc

    assert (SOURCE / "docs" / "options.md").read_text() == options_doc()
    assert {o.name for o in options.OPTIONS if o.flag_only} == nodeconfig.FLAG_ONLY
    assert {"force", "allow_rollback", "cfssl_allow_http", "skip_mtls_proof"} <= (
        nodeconfig.FLAG_ONLY
    )
    assert "cfssl_auth_key" in options.SECRETS


@pytest.mark.parametrize(
    ("kind", "committed"),
    [("man", "docs/typhapki.1"), ("bash", "contrib/bash-completion/typhapki")],
)
def test_the_committed_files_are_generated_from_the_table(kind: str, committed: str) -> None:
    """What the .deb installs (debian/typhapki.manpages, debian/typhapki.bash-completion)
    is what the table makes: regenerate with `python3 -m typhapki.cli.docgen KIND FILE`."""
    made = {"man": docgen.man_page, "bash": docgen.bash_completion}[kind]()
    regenerate = f"python3 -m typhapki.cli.docgen {kind} {committed}"
    assert (SOURCE / committed).read_text() == made, regenerate
    listed = {"man": "typhapki.manpages", "bash": "typhapki.bash-completion"}[kind]
    assert (SOURCE / "debian" / listed).read_text().split() == [committed]


def _table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the markdown table whose header line starts `header`."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return rows


def test_exit_codes_are_declared_once() -> None:
    """errors.py's codes are the man page's and docs/exit-codes.md's, in one order."""
    from typhapki import errors

    declared = [code for code, _ in docgen.EXIT_STATUS]
    constants = {v for k, v in vars(errors).items() if k.startswith("EXIT_")}
    assert set(declared) == constants | {130}
    assert declared == sorted(declared)
    page = docgen.man_page()
    exits = page.split(".SH EXIT STATUS")[1].split(".SH ")[0]
    assert [int(c) for c in re.findall(r"\\fB(\d+)\\fR", exits)] == declared
    doc = (SOURCE / "docs" / "exit-codes.md").read_text()
    assert [int(row[0]) for row in _table_rows(doc, "| code |")] == declared
    commands = {c.name for c in options.COMMANDS}
    assert {c for cs in docgen.EXIT_COMMANDS.values() for c in cs} <= commands
    # Every command has its row in the per-command table, and a code only some commands
    # exit with is named only in theirs.
    per_command = {
        row[0].strip("`"): " | ".join(row[1:]) for row in _table_rows(doc, "| command |")
    }
    assert set(per_command) == commands
    for command, cells in per_command.items():
        for code in re.findall(r"\b(\d+): ", cells):
            assert int(code) in docgen.exit_codes(command), (command, code)


def _readme_command(cell: str) -> str | None:
    """The command a row of README.md's command table is about (`typhapki ca init ...`)."""
    words = cell.strip("`").split()[1:]
    names = {c.name for c in options.COMMANDS}
    found = [" ".join(words[:n]) for n in range(1, len(words) + 1)]
    return next((name for name in reversed(found) if name in names), None)


def test_readme_command_table_holds_every_command_and_its_exit_codes() -> None:
    """README.md's command table names every command, and every `exit N` it gives a
    command is one that command exits with (the fleet's PuppetDB failure is 8, not 6)."""
    readme = (SOURCE / "README.md").read_text()
    rows = _table_rows(readme, "| command | what it does |")
    seen = set()
    for row in rows:
        command = _readme_command(row[0])
        if command is None:
            assert row[0] == "`typhapki --version`", row
            continue
        seen.add(command.split()[0])
        for code in re.findall(r"\bexits? (\d+)\b", row[1]):
            assert int(code) in docgen.exit_codes(command), (command, code)
    assert seen == {c.name.split()[0] for c in options.COMMANDS}


@pytest.mark.parametrize("command", ["restart-typha", "fleet"])
def test_exit_codes_of_a_command_come_from_the_declaration(command: str) -> None:
    """A code only some commands exit with is not offered to the others."""
    from typhapki import errors

    assert (errors.EXIT_DEFERRED in docgen.exit_codes(command)) == (command == "restart-typha")
    assert (errors.EXIT_PUPPETDB in docgen.exit_codes(command)) == (command == "fleet")


def test_the_puppet_types_are_generated_from_the_option_table() -> None:
    """The Puppet module's types of hiera values (puppet/typhapki/types/typha*,
    functions/typha_types.pp, types/certs/cfsslauth.pp) are what typhapki/cli/docgen.py
    makes from the option table and the hiera judge: every key of `typha:` has a type,
    the stages are wiring.py's Stage, and the auth keys are the signer's secrets."""
    from typhapki.inventory.hiera import TYPHA_READERS
    from typhapki.settings.wiring import Stage

    generated = docgen.puppet_types()
    module = SOURCE / "puppet" / "typhapki"
    stale = [p for p, text in generated.items() if (module / p).read_text() != text]
    assert stale == [], "python3 -m typhapki.cli.docgen puppet puppet/typhapki"
    hand_made = {
        p.relative_to(module).as_posix()
        for p in [*module.glob("types/typha/*.pp"), *module.glob("functions/*.pp")]
    }
    assert hand_made <= set(generated)
    function = generated["functions/typha_types.pp"]
    assert sorted(re.findall(r"^    '(\w+)'", function, re.M)) == sorted(TYPHA_READERS)
    stage = generated["types/typha/tlsstage.pp"]
    assert all(f"'{s.value}'" in stage for s in Stage)
    auth = generated["types/certs/cfsslauth.pp"]
    secrets = sorted(o.name for o in options.group("signer") if o.name.startswith("cfssl_auth"))
    assert sorted(set(re.findall(r"(cfssl_auth_key\w*)", auth))) == secrets
