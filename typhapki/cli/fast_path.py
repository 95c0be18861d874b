"""The commands Puppet runs on every agent run, parsed from the option table alone.

`check` (an exec's unless) and `facts` (a Facter fact) run on every node every 30
minutes, `metrics` (the systemd timer) every 5. Importing typer (and its click and
rich) and building its command tree costs more than the work itself
(docs/performance.md, bench/bench_facts_check.py), so for a plain command line of these
commands typhapki/cli/console.py hands `fast_parse`'s keyword arguments straight to the
command's body below, read from the one declaration of each option
(typhapki/options.py). Anything else (--help, an unknown, repeated or
malformed option, a value that does not convert plainly, a missing required option)
goes to typer (typhapki/cli/typer_app.py), which parses it and reports it as usual; typer calls
the same bodies, so both paths do the same work with the same values.

This module imports neither typer nor click, and nothing heavy at import time.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki import options
from typhapki.errors import EXIT_IO, TyphapkiError, UsageError, one_line, unprintable
from typhapki.numbers import option_number
from typhapki.provenance import OptionError, parsed
from typhapki.record import field, record

if TYPE_CHECKING:
    from typing import Any

    from typhapki.settings.pki import PkiOptions
    from typhapki.settings.signer import SignerOptions

FAST_COMMANDS = ("check", "facts", "metrics")
_PKI_NAMES = tuple(o.name for o in options.group("pki"))
_SIGNER_NAMES = tuple(o.name for o in options.group("signer"))
_PUPPETDB_NAMES = tuple(o.name for o in options.group("puppetdb"))


@record(frozen=True)
class CliState:
    """What main() learnt before parsing: the node configuration file's error, if any,
    and where the file sets each value (per command: param name -> `FILE: KEY`)."""

    config_error: str | None = None
    origins: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def source(self, command: str, name: str) -> str:
        """Where the node configuration file sets `name` for `command`."""
        return self.origins.get(command, {}).get(name, "the node configuration file")


def guarded(body: Callable[[], int], sources: Mapping[str, str] | None = None) -> int:
    """The error boundary: one line and an exit code for every expected failure.

    `sources`, the command's (option -> a flag, or the node configuration's file and
    key), words a refused option value (`OptionError`, typhapki/provenance.py)
    with the place that set it."""
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


def bundled(
    body: Callable[..., int], values: dict[str, Any], sources: Mapping[str, str]
) -> dict[str, Any]:
    """The body's keyword arguments from the parsed values: a body that takes `pki` or
    `signer` gets those groups as one PkiOptions / SignerOptions object, each with where
    its values came from (`sources`: a flag or the node configuration file);
    a body that takes `sources` gets them as they are."""
    code = body.__code__  # not inspect.signature: inspect alone costs ~5 ms to import
    takes = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    kwargs = dict(values)
    if "pki" in takes:  # imported here: `facts` takes the options as text
        from typhapki.settings.pki import PkiOptions

        kwargs["pki"] = PkiOptions(
            **{n: kwargs.pop(n) for n in _PKI_NAMES},
            sources={n: sources[n] for n in _PKI_NAMES if n in sources},
        )
    if "signer" in takes:
        from typhapki.settings.signer import SignerOptions

        kwargs["signer"] = SignerOptions(
            **{n: kwargs.pop(n) for n in _SIGNER_NAMES},
            sources={n: sources[n] for n in _SIGNER_NAMES if n in sources},
        )
    if "db" in takes:  # `fleet`: how it reaches PuppetDB
        from typhapki.fleet.access import PuppetDBOptions

        kwargs["db"] = PuppetDBOptions(**{n: kwargs.pop(n) for n in _PUPPETDB_NAMES})
    if "sources" in takes:
        kwargs["sources"] = dict(sources)
    return kwargs


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
    about the shared options do (typhapki/provenance.py). typer's commands
    (typhapki/cli/typer_app.py) call it before their body; the fast path leaves such a value to
    them (`_plain`). `facts` reports its values inside the fact instead."""
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


# --- the bodies: typer's commands (typhapki/cli/typer_app.py) call them too ---------------------


def check_body(
    *,
    out: Path,
    role: str,
    ca_dir: Path | None,
    new_ca_dir: Path | None,
    trust: Sequence[Path] | None,
    quiet: bool,
    hiera: Path | None,
    cluster: str | None,
    nagios: bool,
    probe_address: str | None,
    no_probe: bool,
    typha_uid: int | None,
    warning: str | None,
    critical: str | None,
    source: Path | None,
    pki: PkiOptions,
    signer: SignerOptions,
    state_dir: Path | None,
    sources: Mapping[str, str],
) -> int:
    """`check`: judge the set by issue's desired state (typhapki/commands/check.py)."""
    if nagios:
        from typhapki.commands.check_nagios import check_nagios

        return guarded(
            lambda: check_nagios(
                out,
                role,
                pki,
                ca_dir,
                list(trust or []),
                hiera,
                cluster,
                probe_address,
                no_probe,
                warning,
                critical,
                signer,
                state_dir,
                typha_uid,
                sources,
            )
        )
    if warning is not None or critical is not None:
        from typhapki.commands.check_nagios import thresholds_without_nagios

        return guarded(thresholds_without_nagios)
    from typhapki.commands.check import check
    from typhapki.settings.desired import Request

    request = Request(
        out, role, pki, signer, ca_dir, tuple(trust or ()), hiera, cluster, source, state_dir,
        new_ca_dir,
    )  # fmt: skip
    return guarded(lambda: check(request, quiet), sources)


def facts_body(
    *,
    extra_args: Sequence[str],
    config_error: str | None,
    trust: Sequence[str] | None,
    sources: Mapping[str, str],
    **raw: Any,
) -> int:
    """`facts`: every value as text, a mistake reported inside the fact (exit 0)."""
    from typhapki.commands.facts import RawFactOptions, facts

    options_ = RawFactOptions(
        values={**raw, "trust": list(trust or [])},
        extra_args=list(extra_args),
        config_error=config_error,
        sources=sources,
    )
    return guarded(lambda: facts(options_))


def metrics_body(
    *,
    out: Path,
    role: str,
    ca_dir: Path | None,
    trust: Sequence[Path] | None,
    hiera: Path | None,
    cluster: str | None,
    textfile_dir: Path | None,
    state_dir: Path | None,
    probe_address: str | None,
    no_probe: bool,
    typha_uid: int | None,
    pki: PkiOptions,
    signer: SignerOptions,
    sources: Mapping[str, str],
) -> int:
    """`metrics`: the Prometheus text format (typhapki/commands/metrics.py)."""
    from typhapki.commands.metrics import metrics

    return guarded(
        lambda: metrics(
            out,
            role,
            pki,
            ca_dir,
            list(trust or []),
            hiera,
            cluster,
            textfile_dir,
            state_dir,
            probe_address,
            no_probe,
            signer,
            typha_uid,
            sources,
        ),
        sources,
    )


BODIES: dict[str, Callable[..., int]] = {
    "check": check_body,
    "facts": facts_body,
    "metrics": metrics_body,
}


# --- the parser ----------------------------------------------------------------------


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
        raise ValueError(value)  # refused by `checked`, after typer parsed it
    if opt.group == "command" and opt.choices and value not in opt.choices:
        raise ValueError(value)  # refused by typer's command, naming where it came from
    text = str(value)
    if not text or text.startswith("-"):
        raise ValueError(text)  # missing, empty or option-like: typer decides
    if opt.kind in (int, float):
        try:
            return option_number(opt.kind, text, opt.name)
        except TyphapkiError:
            raise ValueError(text) from None  # refused by `checked`, naming its source
    return opt.kind(text)


def fast_parse(
    argv: Sequence[str],
    default_map: Mapping[str, Any] | None = None,
    state: CliState | None = None,
) -> tuple[Callable[..., int], dict[str, Any]] | None:
    """The body and its keyword arguments for a plain `check`/`facts`/`metrics` line, or
    None when typer must parse it. `default_map` as click's (the node configuration
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
    if spec.extra_args:
        values["extra_args"] = []
        values["config_error"] = state.config_error
    body = BODIES[argv[0]]
    return body, bundled(body, values, sources)
