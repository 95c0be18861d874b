"""The error boundary around the one dispatch of a parsed command line.

Both parsers, the fast path (typhapki/cli/fast_path.py) and typer
(typhapki/cli/typer_app.py), end in a `Call`: the command, its values and where each
came from. `dispatch` checks the values, builds the command's one request
(typhapki/commands/__init__.py `CommandRequest`) and runs the body the option table
names for it (typhapki/options.py `BODIES`) inside `guarded`, the one place an
expected failure becomes one line on stderr and its documented exit code
(docs/exit-codes.md); no traceback ever reaches a terminal. typhapki/cli/console.py
calls `dispatch` once per run.

This module imports neither typer nor click, and nothing heavy at import time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from typhapki import options
from typhapki.errors import EXIT_IO, TyphapkiError, UsageError, one_line, unprintable
from typhapki.numbers import option_number
from typhapki.provenance import OptionError, parsed
from typhapki.record import field, record


@record(frozen=True)
class CliState:
    """What main() learnt before parsing: the node configuration file's error, if any,
    and where the file sets each value (per command: param name -> `FILE: KEY`)."""

    config_error: str | None = None
    origins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def source(self, command: str, name: str) -> str:
        """Where the node configuration file sets `name` for `command`."""
        return self.origins.get(command, {}).get(name, "the node configuration file")


@record(frozen=True)
class Call:
    """A parsed command line: the command, its option values (as the parser handed
    them) and where each came from (option -> a flag, or the node configuration's file
    and key), and for `facts` its stray arguments and the configuration's error."""

    spec: options.Command
    values: dict[str, Any]
    sources: dict[str, str]
    extra_args: tuple[str, ...] = ()
    config_error: str | None = None


def guarded(body: Callable[[], int], sources: Mapping[str, str] | None = None) -> int:
    """The error boundary: one line and an exit code for every expected failure.

    `sources`, the command's (option -> a flag, or the node configuration's file and
    key), words a refused option value (`OptionError`, typhapki/provenance.py) with the
    place that set it."""
    try:
        return body()
    except TyphapkiError as exc:
        message = exc.worded(sources or {}) if isinstance(exc, OptionError) else str(exc)
        # Escaped here, once for every source: a key or value from a flag, the node
        # configuration or hiera that holds a newline stays on this one line.
        print(f"typhapki: error: {one_line(message)}", file=sys.stderr)
        return exc.exit_code
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as cat and grep do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        print("typhapki: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # the filesystem said no somewhere we did not expect
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"typhapki: error: {one_line(f'{where}{exc.strerror or exc}')}", file=sys.stderr)
        return EXIT_IO


def dispatch(call: Call) -> int:
    """Run the command of `call` inside the boundary: its values checked (`checked`),
    its request built, its body (typhapki/options.py `BODIES`) imported and called."""
    return guarded(lambda: body_of(call.spec.name)(request_of(call)), call.sources)


def body_of(command: str) -> Callable[[Any], int]:
    """The body the option table names for `command` (its module imported now)."""
    module, _, function = options.BODIES[command].partition(":")
    loaded = __import__(f"typhapki.commands.{module}", fromlist=[function])
    body: Callable[[Any], int] = getattr(loaded, function)
    return body


def request_of(call: Call) -> Any:
    """The command's one request, once its values passed `checked`."""
    from typhapki.commands import CommandRequest

    values = checked(call.spec, dict(call.values), call.sources)
    return CommandRequest(call.spec.name, values, call.sources, call.extra_args, call.config_error)


def _number(kind: type, text: str) -> Callable[[str], int | float]:
    """The number parser's reading of a number option's text, naming what it reads."""
    return lambda what: option_number(kind, text, what)


def checked(
    spec: options.Command, values: dict[str, Any], sources: Mapping[str, str]
) -> dict[str, Any]:
    """`values`, once no path among them holds a character that does not print as
    itself (NUL, a newline, an escape sequence), and a command's own option with choices
    (--role, --mode, --stage...) that the node configuration file set holds one of them.
    Else UsageError naming the option, the value and where it came from, as errors
    about the shared options do (typhapki/provenance.py). A number typer handed as
    text is read by the number parser here; the fast path leaves a value it would
    refuse to typer (typhapki/cli/fast_path.py `_plain`). `facts` reports its values
    inside the fact instead."""
    if spec.extra_args:
        return values
    for opt in spec.options:
        value = values.get(opt.name)
        where = sources.get(opt.name, opt.flag)
        if opt.kind in (int, float) and isinstance(value, str):  # typer hands the text
            values[opt.name] = parsed(opt.name, value, _number(opt.kind, value))
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            text = os.fspath(item) if isinstance(item, str | os.PathLike) else None
            if text is None:
                continue
            if opt.kind is Path and (char := unprintable(text)) is not None:
                raise UsageError(
                    f"{opt.name} {text!r} (from {where}): a path with the control character "
                    f"{char}; refused"
                )
            # From its flag, the body's own words (`--role: a CSR is for one role`) name
            # it well; from the file, they would name a flag nobody typed.
            bad_choice = opt.group == "command" and opt.choices and text not in opt.choices
            if bad_choice and where != opt.flag:
                *first, last = opt.choices
                raise UsageError(
                    f"{opt.name} {text!r} (from {where}): expected {', '.join(first)} or {last}"
                )
    return values
