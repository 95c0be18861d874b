"""The command line as typer parses it: built from the option table, nothing else.

Every command's options, and its help, are declared once in typhapki/options.py, and
every command is registered from there. What typer parses becomes a `Call`
(typhapki/cli/boundary.py), which the command returns to typhapki/cli/console.py: the
body (typhapki/options.py `BODIES`) runs there, in the one dispatch both parsers share.
typhapki/cli/console.py calls this module only for what the fast path of
typhapki/cli/fast_path.py does not parse.
"""

from __future__ import annotations

import inspect
from typing import Any, List, Optional

import typer
import typer.core

from typhapki import options
from typhapki.cli.boundary import Call, CliState

app = typer.Typer(
    name="typhapki",
    help=options.PROGRAM_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
ca_app = typer.Typer(help="The per-cluster CA.", no_args_is_help=True)
app.add_typer(ca_app, name="ca")
fleet_app = typer.Typer()  # its help is the `fleet` command's, from the table
app.add_typer(fleet_app, name="fleet")
# The command groups: `ca init`, and `fleet`, which is also a command of its own.
_GROUPS = {"ca": ca_app, "fleet": fleet_app}


def _print_version(value: bool) -> None:
    if value:
        from typhapki import __version__

        print(f"typhapki {__version__}")
        raise typer.Exit(0)


@app.callback()
def _root(
    version: bool = typer.Option(
        False,
        "--version",
        callback=_print_version,
        is_eager=True,
        help="Print typhapki's version and exit.",
    ),
) -> None:
    """Mutual TLS between Calico Felix and Typha, and a DNS-gated Typha ferm rule."""


# What --help shows for a number option, which typer takes as text: the number parser
# reads it (typhapki/cli/boundary.py `checked`), as it reads the node configuration's.
_NUMBER_METAVARS = {int: "INTEGER", float: "FLOAT"}


def _annotation(opt: options.Opt) -> Any:
    """The parameter's type as typer 0.7 reads it: `Optional`/`List`, not `X | None`.
    A number option is text here: click's int() and float() take what the number
    parser refuses (Unicode digits, `1_0`, nan, inf, a sign)."""
    kind: Any = str if opt.kind in _NUMBER_METAVARS else opt.kind
    if opt.multiple:
        return List[kind] if opt.required else Optional[List[kind]]
    return kind if opt.kind is bool or opt.default is not None else Optional[kind]


def _typer_param(opt: options.Opt) -> Any:
    if opt.argument:
        return typer.Argument(..., help=opt.help, metavar=opt.flag)
    metavar = _NUMBER_METAVARS.get(opt.kind)
    if metavar is not None:
        return typer.Option(opt.default, *opt.decls, help=opt.help, metavar=metavar)
    return typer.Option(opt.default, *opt.decls, help=opt.help)


def declared(name: str) -> Any:
    """The typer option of a shared option, from its one declaration
    (typhapki/options.py)."""
    return _typer_param(options.BY_NAME[name])


def shared(group: str) -> dict[str, tuple[Any, Any]]:
    """A group of shared options as name -> (annotation, typer option)."""
    return {opt.name: (_annotation(opt), declared(opt.name)) for opt in options.group(group)}


def _split_options(cmd: Any, ctx: Any, formatter: Any, advanced: frozenset[str]) -> None:
    """The arguments, the common options, then the rest under "Advanced options"
    (`options.advanced`), as click lays out a section; typer's own layout is one
    "Options" section."""
    sections: dict[str, list[tuple[str, str]]] = {
        "Arguments": [], "Options": [], "Advanced options": []
    }  # fmt: skip
    for param in cmd.get_params(ctx):
        record = param.get_help_record(ctx)
        if record is None:
            continue
        if param.param_type_name == "argument":
            sections["Arguments"].append(record)
        else:
            sections["Advanced options" if param.name in advanced else "Options"].append(record)
    for title, rows in sections.items():
        if rows:
            with formatter.section(title):
                formatter.write_dl(rows)


class SplitCommand(typer.core.TyperCommand):
    """A command whose `--help` puts its advanced options last, under their own heading.
    The app runs with rich_markup_mode=None, so click's `format_options` prints the
    options on typer 0.7 (no rich on Debian) as on the newest typer."""

    advanced: frozenset[str] = frozenset()

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _split_options(self, ctx, formatter, self.advanced)


class SplitGroup(typer.core.TyperGroup):
    """`fleet`, a command and a group: its options split as SplitCommand's, then its
    subcommands."""

    advanced: frozenset[str] = frozenset()

    def format_options(self, ctx: Any, formatter: Any) -> None:
        _split_options(self, ctx, formatter, self.advanced)
        self.format_commands(ctx, formatter)


def _register(spec: options.Command) -> None:
    """Register the command `spec` under typer with its options from the table.

    typer reads the parameters from the signature, so the registered callback carries
    the table's. It runs nothing: it returns the parsed `Call`, the values with where
    each came from, and typhapki/cli/console.py dispatches it as it does the fast
    path's.
    """
    *group_words, word = spec.name.split()
    target = _GROUPS[group_words[0]] if group_words else app
    params = [
        inspect.Parameter(
            opt.name,
            inspect.Parameter.KEYWORD_ONLY,
            default=_typer_param(opt),
            annotation=_annotation(opt),
        )
        for opt in spec.options
    ]
    params.insert(
        0, inspect.Parameter("ctx", inspect.Parameter.KEYWORD_ONLY, annotation=typer.Context)
    )

    def wrapper(ctx: typer.Context, **values: Any) -> Call | None:
        if ctx.invoked_subcommand is not None:
            return None  # a group's own command (`fleet`) before one of its subcommands
        state = ctx.obj if isinstance(ctx.obj, CliState) else CliState()
        sources = {}
        for opt in spec.options:
            given = getattr(ctx.get_parameter_source(opt.name), "name", "")
            if given == "COMMANDLINE":
                sources[opt.name] = opt.flag
            elif given == "DEFAULT_MAP":
                sources[opt.name] = state.source(spec.name, opt.name)
        if spec.extra_args:
            return Call(spec, values, sources, tuple(ctx.args), state.config_error)
        return Call(spec, values, sources)

    wrapper.__name__ = spec.name.replace(" ", "_").replace("-", "_")
    wrapper.__doc__ = spec.help
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    settings = {"ignore_unknown_options": True, "allow_extra_args": True} if spec.extra_args else {}
    advanced = frozenset(o.name for o in spec.options if options.advanced(o))
    if spec.name in _GROUPS:  # `fleet`: the group's callback, run when no subcommand is
        group_cls = type("SplitGroup", (SplitGroup,), {"advanced": advanced})
        _GROUPS[spec.name].callback(invoke_without_command=True, cls=group_cls)(wrapper)
    else:
        cls = type("SplitCommand", (SplitCommand,), {"advanced": advanced})
        target.command(word, context_settings=settings, cls=cls)(wrapper)


for _spec in options.COMMANDS:  # in the table's order, as --help lists them
    _register(_spec)
