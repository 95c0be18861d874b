"""Every `--help` the command line prints, byte for byte as it was before the command
line moved into typhapki/cli/ (issue 42: "no behaviour changes").

tests/cli/help/typer-VERSION.json holds what each typer release the legs run printed
(bookworm's 0.7.0, trixie's 0.15.2, PyPI's newest when it was written), at 80 columns:
per command line, its exit code, standard output and standard error. typer spells its
metavars its own way in each release; a release not listed (a newer one from PyPI) is
compared after that spelling and the wrapping are taken out, so what is ours (the
commands, their options in order, every help text) is still held.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.conftest import run_cli

HELP = Path(__file__).parent / "help"
# What typer owns in a help line: the metavar (TEXT, PATH, INTEGER, FLOAT, <str>,
# <path>, <list[Path]>, ...) and the columns it wraps at.
_METAVAR = re.compile(r"<[^>\s]+>|\b(?:TEXT|PATH|INTEGER|FLOAT)\b")


def _typer_version() -> str:
    import typer

    return str(typer.__version__)


def golden() -> tuple[dict[str, list[object]], bool]:
    """The recorded help for this leg's typer, and whether it is this exact release."""
    exact = HELP / f"typer-{_typer_version()}.json"
    if exact.is_file():
        return json.loads(exact.read_text()), True
    releases = HELP.glob("typer-*.json")
    newest = max(releases, key=lambda p: [int(n) for n in re.findall(r"\d+", p.stem)])
    return json.loads(newest.read_text()), False


def loose(text: str) -> str:
    """`text` without what typer spells its own way: metavars, an argument's braces and
    ellipsis, the escaping of "[", the wrapping (a word cut at its hyphen included)."""
    text = _METAVAR.sub("", text).replace("\\[", "[").replace("...", "")
    words = " ".join(text.replace("{", "").replace("}", "").split())
    return re.sub(r"(\w)- (\w)", r"\1-\2", words)


RECORDED, EXACT = golden()


@pytest.mark.parametrize("line", sorted(RECORDED))
def test_help_is_what_it_was(line: str) -> None:
    words = [] if line == "typhapki" else line.split()
    result = run_cli(*words, "--help", env={"COLUMNS": "80", "TYPHAPKI_CONFIG": "/nonexistent"})
    code, stdout, stderr = RECORDED[line]
    if EXACT:
        assert (result.returncode, result.stdout, result.stderr) == (code, stdout, stderr)
    else:
        assert (result.returncode, loose(result.stdout), result.stderr) == (
            code, loose(str(stdout)), stderr
        )  # fmt: skip


def test_every_command_is_recorded() -> None:
    """A new command gets its recorded help with it: the list above is not shorter than
    the table."""
    from typhapki import options

    assert set(RECORDED) == {"typhapki", "ca", *(c.name for c in options.COMMANDS)}


def test_the_loose_comparison_still_sees_our_words() -> None:
    """The fallback for an unknown typer keeps every word of ours: two releases that
    differ only in typer's spelling compare equal, a changed help text does not."""
    old = json.loads((HELP / "typer-0.15.2.json").read_text())
    new = json.loads((HELP / "typer-0.29.2.json").read_text())
    assert all(loose(str(old[k][1])) == loose(str(new[k][1])) for k in old)
    changed = str(new["issue"][1]).replace("Output directory", "Output folder")
    assert loose(changed) != loose(str(old["issue"][1]))
