"""The command line as typer parses it: built from the option table, nothing else.

Every command's options, and its help, are declared once in typhapki/options.py;
`command(name)` registers a body with them. Every command body lives in
typhapki/commands/ and returns an exit code. Errors a user can cause arrive at the
boundary (typhapki/cli/fast_path.py's `guarded`) as TyphapkiError and leave as one line on
stderr and the documented exit code (docs/exit-codes.md); no traceback ever reaches a
terminal. typhapki/cli/console.py calls this module only for what the fast path of
typhapki/cli/fast_path.py does not parse.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any, List, Optional

import typer
import typer.core

from typhapki import options
from typhapki.cli.fast_path import BODIES, CliState, bundled, checked, guarded
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import SignerOptions

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
# reads it (typhapki/cli/fast_path.py `checked`), as it reads the node configuration's.
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


_BODIES: dict[str, Callable[..., int]] = dict(BODIES)


def command(name: str) -> Callable[[Callable[..., int]], Callable[..., int]]:
    """Make `body` the command `name` of the table (typhapki/options.py);
    `_register` gives it the options and help the table declares for it."""

    def decorate(body: Callable[..., int]) -> Callable[..., int]:
        _BODIES[name] = body
        return body

    return decorate


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


def _register(spec: options.Command, body: Callable[..., int]) -> None:
    """Register `body` under typer with the command's options from the table.

    typer reads the parameters from the signature, so the registered wrapper carries the
    table's; it hands the body the values, the `pki` and `signer` groups as one object
    each when the body takes them (typhapki/cli/fast_path.py's `bundled`, as on the fast
    path), and turns the body's exit code into typer's exit.
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

    def wrapper(ctx: typer.Context, **values: Any) -> None:
        if ctx.invoked_subcommand is not None:
            return  # a group's own command (`fleet`) before one of its subcommands
        state = ctx.obj if isinstance(ctx.obj, CliState) else CliState()
        if spec.extra_args:
            values["extra_args"] = list(ctx.args)
            values["config_error"] = state.config_error
        sources = {}
        for opt in spec.options:
            given = getattr(ctx.get_parameter_source(opt.name), "name", "")
            if given == "COMMANDLINE":
                sources[opt.name] = opt.flag
            elif given == "DEFAULT_MAP":
                sources[opt.name] = state.source(spec.name, opt.name)
        # A path with a control character, or a choice none of the option's, is refused
        # before the body, in one line naming where it came from.
        raise typer.Exit(
            guarded(lambda: body(**bundled(body, checked(spec, values, sources), sources)), sources)
        )

    wrapper.__name__ = body.__name__
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


# The bodies of the commands Puppet runs on every agent run (check, facts, metrics) live
# in typhapki/cli/fast_path.py, which typhapki/cli/console.py calls without typer for a plain line.
@command("ca init")
def ca_init_cmd(
    *,
    ca_dir: Path,
    key_type: str,
    days: int,
    cn: Optional[str],
    force: bool,
    sources: dict[str, str],
) -> int:
    from typhapki.commands.ca_init import ca_init

    return guarded(lambda: ca_init(ca_dir, key_type, days, cn, force), sources)


@command("issue")
def issue_cmd(
    *,
    ca_dir: Optional[Path],
    new_ca_dir: Optional[Path],
    out: Path,
    role: str,
    trust: Optional[List[Path]],
    json_out: bool,
    hiera: Optional[Path],
    cluster: Optional[str],
    dry_run: bool,
    pki: PkiOptions,
    signer: SignerOptions,
    state_dir: Optional[Path],
    sources: dict[str, str],
) -> int:
    from typhapki.commands.issue import issue
    from typhapki.settings.desired import Request

    request = Request(
        out, role, pki, signer, ca_dir, tuple(trust or ()), hiera, cluster,
        state_dir=state_dir, new_ca_dir=new_ca_dir,
    )  # fmt: skip
    return guarded(lambda: issue(request, json_out, dry_run), sources)


@command("install")
def install_cmd(
    *,
    out: Path,
    role: str,
    source: Optional[Path],
    cert: Optional[Path],
    bundle: Optional[Path],
    json_out: bool,
    hiera: Optional[Path],
    cluster: Optional[str],
    pki: PkiOptions,
    sources: dict[str, str],
) -> int:
    from typhapki.commands.install import install

    return guarded(
        lambda: install(out, role, source, cert, bundle, pki, json_out, hiera, cluster), sources
    )


@command("request")
def request_cmd(
    *,
    out: Path,
    role: str,
    csr_out: Optional[Path],
    hiera: Optional[Path],
    cluster: Optional[str],
    pki: PkiOptions,
    sources: dict[str, str],
) -> int:
    from typhapki.commands.request import request

    return guarded(lambda: request(out, role, csr_out, pki, hiera, cluster), sources)


@command("sign")
def sign_cmd(
    *,
    ca_dir: Path,
    csr: Path,
    role: str,
    cert_out: Optional[Path],
    hiera: Optional[Path],
    cluster: Optional[str],
    pki: PkiOptions,
    sources: dict[str, str],
) -> int:
    from typhapki.commands.sign import sign

    return guarded(lambda: sign(ca_dir, csr, role, cert_out, pki, hiera, cluster), sources)


@command("inspect")
def inspect_cmd(*, paths: List[Path], json_out: bool, sources: dict[str, str]) -> int:
    from typhapki.commands.inspect_cmd import inspect

    return guarded(lambda: inspect(paths, json_out), sources)


@command("rollback")
def rollback_cmd(*, out: Path, role: Optional[str], bundle: bool, sources: dict[str, str]) -> int:
    from typhapki.commands.rollback import rollback

    return guarded(lambda: rollback(out, role, bundle), sources)


# --- manifests and rotate-ca (issue 5) ---
@command("manifests")
def manifests_cmd(
    *,
    out: Path,
    fmt: str,
    namespace: Optional[str],
    identity: Optional[str],
    wiring: bool,
    wiring_dir: Optional[Path],
    kustomize_dir: Optional[Path],
    kustomize_base: Optional[str],
    post_render: bool,
    typha_uid: Optional[int],
    typha_gid: Optional[int],
    tls_stage: Optional[str],
    tls_min_version: Optional[str],
    tls_cipher_suites: Optional[str],
    typha_deployment: Optional[Path],
    hiera: Optional[Path],
    cluster: Optional[str],
    sources: dict[str, str],
) -> int:
    from typhapki.commands.manifests import manifests

    return guarded(
        lambda: manifests(
            out,
            fmt,
            namespace,
            identity,
            wiring,
            wiring_dir,
            kustomize_dir,
            kustomize_base,
            post_render,
            typha_uid,
            typha_gid,
            tls_stage,
            tls_min_version,
            tls_cipher_suites,
            typha_deployment,
            hiera,
            cluster,
            typed=tuple(
                flag
                for name, flag in sources.items()
                if name in ("tls_stage", "tls_min_version", "tls_cipher_suites")
                and flag.startswith("--")
            ),
        ),
        sources,
    )


@command("rotate-ca")
def rotate_ca_cmd(
    *,
    stage: str,
    ca_dir: Path,
    new_ca_dir: Path,
    out: Path,
    role: str,
    check: bool,
    allow_rollback: bool,
    json_out: bool,
    hiera: Optional[Path],
    cluster: Optional[str],
    pki: PkiOptions,
    sources: dict[str, str],
) -> int:
    from typhapki.commands.rotate_ca import rotate_ca

    return guarded(
        lambda: rotate_ca(
            stage,
            ca_dir,
            new_ca_dir,
            out,
            role,
            pki,
            check,
            allow_rollback,
            json_out,
            hiera,
            cluster,
        ),
        sources,
    )


@command("restarted")
def restarted_cmd(*, out: Path, component: str, sources: dict[str, str]) -> int:
    from typhapki.commands.restarted import restarted

    return guarded(lambda: restarted(out, component), sources)


@command("restart-typha")
def restart_typha_cmd(
    *,
    out: Path,
    kubeconfig: Path,
    namespace: str,
    node: Optional[str],
    context: Optional[str],
    timeout: float,
    hiera: Optional[Path],
    cluster: Optional[str],
    sources: dict[str, str],
) -> int:
    from typhapki.commands.restart_typha import restart_typha

    return guarded(
        lambda: restart_typha(out, kubeconfig, namespace, node, context, timeout, hiera, cluster),
        sources,
    )


@command("probe")
def probe_cmd(
    *,
    address: Optional[str],
    out: Path,
    typha_cn: Optional[str],
    typha_uri_san: Optional[str],
    hiera: Optional[Path],
    cluster: Optional[str],
    timeout: float,
    json_out: bool,
    sources: dict[str, str],
) -> int:
    from typhapki.commands.probe import probe

    pki = PkiOptions(typha_cn=typha_cn, typha_uri_san=typha_uri_san, sources=sources)
    # None: the local Typha of hiera's live switch stage (the TLS one's port).
    return guarded(lambda: probe(address, out, pki, hiera, cluster, timeout, json_out), sources)


@command("lint-hiera")
def lint_hiera_cmd(
    *,
    files: List[Path],
    offline: bool,
    nameserver: Optional[List[str]],
    timeout: Optional[float],
    json_out: bool,
    sources: dict[str, str],
) -> int:
    from typhapki.commands.lint_hiera import lint_hiera

    return guarded(lambda: lint_hiera(files, offline, nameserver or [], json_out, timeout), sources)


@command("fleet")
def fleet_cmd(
    *,
    db: Any,
    cluster: Optional[str],
    hiera: Optional[Path],
    json_out: bool,
    max_age: str,
    sources: dict[str, str],
) -> int:
    from typhapki.commands.fleet import fleet

    return guarded(lambda: fleet(db, cluster, json_out, max_age, hiera), sources)


def _fleet_kube(values: dict[str, Any]) -> Any:
    """The `FLEET_KUBE` options of typhapki/options.py, as one object."""
    from typhapki.fleet.access import KubeOptions

    return KubeOptions(**{n: values.pop(n) for n in ("kubeconfig", "context", "namespace",
                                                      "kube_timeout")})  # fmt: skip


@command("fleet ready")
def fleet_ready_cmd(
    *,
    db: Any,
    cluster: str,
    stage: str,
    since: Optional[str],
    new_ca: Optional[str],
    old_ca: Optional[str],
    max_age: str,
    sources: dict[str, str],
    **kube: Any,
) -> int:
    from typhapki.commands.fleet_ready import fleet_ready

    return guarded(
        lambda: fleet_ready(db, cluster, stage, since, new_ca, old_ca, max_age, _fleet_kube(kube)),
        sources,
    )


@command("fleet gate")
def fleet_gate_cmd(
    *,
    db: Any,
    hiera: Path,
    base: Optional[str],
    old: Optional[Path],
    no_puppetdb: bool,
    sources: dict[str, str],
    **kube: Any,
) -> int:
    from typhapki.commands.fleet_gate import fleet_gate

    return guarded(
        lambda: fleet_gate(db, hiera, base, old, no_puppetdb, _fleet_kube(kube)), sources
    )


def _gate_values(values: dict[str, Any]) -> dict[str, Any]:
    """The firewall commands' shared values, as GateOptions fields."""
    values["nameservers"] = tuple(values.pop("nameserver") or ())
    return values


@command("ferm")
def ferm_cmd(
    *,
    hiera: Path,
    cluster: str,
    style: Optional[str],
    templates: Optional[Path],
    sources: dict[str, str],
    **gate: Any,
) -> int:
    from typhapki.commands.ferm import FermOptions, ferm

    opts = FermOptions(
        hiera=hiera, cluster=cluster, style=style, templates=templates, **_gate_values(gate)
    )
    return guarded(lambda: ferm(opts), sources)


@command("nft")
def nft_cmd(
    *, hiera: Path, cluster: str, sets_only: bool, sources: dict[str, str], **gate: Any
) -> int:
    from typhapki.commands.nft import NftOptions, nft

    opts = NftOptions(hiera=hiera, cluster=cluster, sets_only=sets_only, **_gate_values(gate))
    return guarded(lambda: nft(opts), sources)


for _spec in options.COMMANDS:  # in the table's order, as --help lists them
    _register(_spec, _BODIES[_spec.name])
