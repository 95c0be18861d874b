"""The commands Puppet runs on every agent run, parsed from the option table alone.

`check` (an exec's unless) and `facts` (a Facter fact) run on every node every 30
minutes, `metrics` (the systemd timer) every 5. Importing typer (and its click and
rich) and building its command tree costs more than the work itself
(docs/performance.md, bench/bench_facts_check.py), so for a plain command line of these
commands typhapki/cli/console.py takes `fast_parse`'s `Call`, read from the one
declaration of each option (typhapki/options.py). Anything else (--help, an unknown,
repeated or malformed option, a value that does not convert plainly, a missing required
option) goes to typer (typhapki/cli/typer_app.py), which parses it and reports it as
usual; both end in the same `Call` and the same dispatch (typhapki/cli/boundary.py), so
both paths do the same work with the same values.

This module imports neither typer nor click, and nothing heavy at import time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from typhapki import options
from typhapki.cli.boundary import Call, CliState
from typhapki.errors import TyphapkiError, unprintable
from typhapki.numbers import option_number

FAST_COMMANDS = ("check", "facts", "metrics")


def _plain(opt: options.Opt, value: Any) -> Any:
    """A value as typer would hand it to the body; ValueError when unsure (typer decides).

    Only plain forms are taken: digits for a number, `true`/`false` for a flag from the
    node configuration file; typer's own conversion of anything else may differ between
    typer releases (click's in typer 0.7, pydantic's in the newest)."""
    if opt.kind is bool:
        if isinstance(value, bool):
            return value
        if value in ("true", "false"):  # the node configuration file's text
            return value == "true"
        raise ValueError(value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(value)
    if opt.kind in (str, Path) and not isinstance(value, str):
        raise ValueError(value)  # typer 0.7 takes 30 for a path, typer 0.29 refuses it
    if opt.kind is Path and isinstance(value, str) and unprintable(value) is not None:
        raise ValueError(value)  # refused by boundary.py `checked`, after typer
    if opt.group == "command" and opt.choices and value not in opt.choices:
        raise ValueError(value)  # refused by typer's command, naming where it came from
    text = str(value)
    if not text or text.startswith("-"):
        raise ValueError(text)  # missing, empty or option-like: typer decides
    if opt.kind in (int, float):
        try:
            return option_number(opt.kind, text, opt.name)
        except TyphapkiError:
            raise ValueError(text) from None  # refused by boundary.py `checked`, naming it
    return opt.kind(text)


def fast_parse(
    argv: Sequence[str],
    default_map: Mapping[str, Any] | None = None,
    state: CliState | None = None,
) -> Call | None:
    """The parsed command line of a plain `check`/`facts`/`metrics` line, or None when
    typer must parse it. `default_map` as click's (the node configuration
    file's values: flags win); `state` as main() hands typer."""
    if not argv or argv[0] not in FAST_COMMANDS:
        return None
    spec = options.COMMAND[argv[0]]
    by_decl = {decl: opt for opt in spec.options for decl in opt.decls}
    by_name = {opt.name: opt for opt in spec.options}
    values: dict[str, Any] = {opt.name: opt.default for opt in spec.options}
    state = state if state is not None else CliState()
    sources: dict[str, str] = {}
    try:
        for name, value in dict((default_map or {}).get(argv[0], {})).items():
            sources[name] = state.source(argv[0], name)
            configured = by_name[name]  # KeyError: not an option of ours
            if configured.multiple:
                if not isinstance(value, list | tuple):
                    return None
                values[name] = [_plain(configured, v) for v in value]
            else:
                values[name] = _plain(configured, value)
    except (LookupError, ValueError, TypeError):
        return None
    given: set[str] = set()
    args = iter(argv[1:])
    for token in args:
        decl, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        opt = by_decl.get(decl)
        if opt is None:
            return None  # --help, a positional or unknown word, -abc
        if opt.name in given and not opt.multiple:
            return None
        sources[opt.name] = opt.flag
        if opt.kind is bool:
            if eq:
                return None
            values[opt.name] = True
            given.add(opt.name)
            continue
        if not eq:
            value = next(args, "")
        try:
            converted = _plain(opt, value)
        except ValueError:
            return None
        if opt.multiple:  # flags replace the configured list, as with click
            earlier = values[opt.name] if opt.name in given else []
            values[opt.name] = [*(earlier or []), converted]
        else:
            values[opt.name] = converted
        given.add(opt.name)
    if any(v is ... for v in values.values()):
        return None  # a required option is missing
    return Call(spec, values, sources, config_error=state.config_error if spec.extra_args else None)
