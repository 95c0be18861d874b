"""The command line: option parsing and the error boundary, nothing else.

Every command body lives in typhapki/commands/ and returns an exit code. Errors a
user can cause arrive here as TyphapkiError and leave as one line on stderr and the
documented exit code (docs/exit-codes.md); no traceback ever reaches a terminal.
"""

from __future__ import annotations

import functools
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from typhapki.commands.pki_options import PkiOptions
from typhapki.errors import EXIT_IO, EXIT_USAGE, TyphapkiError

app = typer.Typer(
    name="typhapki",
    help="Mutual TLS between Calico Felix and Typha, and a DNS-gated Typha ferm rule.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
ca_app = typer.Typer(help="The per-cluster CA.", no_args_is_help=True)
app.add_typer(ca_app, name="ca")


def run(body: Callable[[], int]) -> None:
    """The error boundary: one line and an exit code for every expected failure."""
    try:
        code = body()
    except TyphapkiError as exc:
        print(f"typhapki: error: {exc}", file=sys.stderr)
        raise typer.Exit(exc.exit_code) from None
    except BrokenPipeError:
        # The reader went away (`| head`): stop quietly, as cat and grep do.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise typer.Exit(141) from None
    except KeyboardInterrupt:
        print("typhapki: interrupted", file=sys.stderr)
        raise typer.Exit(130) from None
    except OSError as exc:  # the filesystem said no somewhere we did not expect
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"typhapki: error: {where}{exc.strerror or exc}", file=sys.stderr)
        raise typer.Exit(EXIT_IO) from None
    raise typer.Exit(code)


# Options shared by the certificate commands.
CaDir = Annotated[
    Path, typer.Option("--ca-dir", help="Directory holding typhaca.crt and typhaca.key.")
]
Out = Annotated[
    Path, typer.Option("--out", help="Output directory: one subdirectory per pod mount.")
]
Role = Annotated[str, typer.Option("--role", help="typha, felix or both.")]
TyphaCn = Annotated[
    str | None, typer.Option("--typha-cn", help="Typha's CN (FELIX_TYPHACN). Default calico-typha.")
]
FelixCn = Annotated[
    str | None, typer.Option("--felix-cn", help="Felix's CN (TYPHA_CLIENTCN). Default calico-node.")
]
TyphaUri = Annotated[
    str | None, typer.Option("--typha-uri-san", help="Typha's URI SAN (FELIX_TYPHAURISAN).")
]
FelixUri = Annotated[
    str | None, typer.Option("--felix-uri-san", help="Felix's URI SAN (TYPHA_CLIENTURISAN).")
]
KeyTypeOpt = Annotated[
    str | None,
    typer.Option(
        "--key-type", help="ecdsa-p256 (default), ecdsa-p384, rsa-2048, rsa-3072, rsa-4096."
    ),
]
Days = Annotated[int | None, typer.Option("--days", help="Leaf lifetime in days (default 365).")]
RenewBefore = Annotated[
    str | None,
    typer.Option(
        "--renew-before",
        help="Renew this long before expiry (e.g. 30d). Default: after 2/3 of the lifetime.",
    ),
]
KeyOwner = Annotated[
    str | None, typer.Option("--key-owner", help="Owner of the key files (name or uid).")
]
KeyGroup = Annotated[
    str | None, typer.Option("--key-group", help="Group of the key files (name or gid).")
]
KeyMode = Annotated[
    str | None, typer.Option("--key-mode", help="Octal mode of the key files (default 0600).")
]
Trust = Annotated[
    list[Path] | None,
    typer.Option(
        "--trust", help="Extra CA certificate to keep in the bundle (rotation). Repeatable."
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
Hiera = Annotated[
    Path | None,
    typer.Option("--hiera", help="Hiera file or directory: settings from the cluster's typha:."),
]
Cluster = Annotated[
    str | None, typer.Option("--cluster", help="Cluster name in --hiera (flags win over it).")
]


# The DNS gate's options, shared by ferm and lint-hiera.
Nameservers = Annotated[
    list[str] | None,
    typer.Option(
        "--nameserver",
        help="Resolver IP[:PORT], repeatable. Default: $TYPHAPKI_NAMESERVERS, "
        "else /etc/resolv.conf.",
    ),
]
DnsTimeout = Annotated[
    float | None, typer.Option("--timeout", help="Seconds per DNS query (default 2).")
]


# The certificate options every PKI command takes, in PkiOptions field order.
_PKI_OPTIONS: dict[str, Any] = {
    "typha_cn": TyphaCn,
    "felix_cn": FelixCn,
    "typha_uri_san": TyphaUri,
    "felix_uri_san": FelixUri,
    "key_type": KeyTypeOpt,
    "days": Days,
    "renew_before": RenewBefore,
    "key_owner": KeyOwner,
    "key_group": KeyGroup,
    "key_mode": KeyMode,
}


def with_pki_options(command: Callable[..., None]) -> Callable[..., None]:
    """Give a command the certificate options, handed to it as one `pki: PkiOptions`.

    typer reads the parameters from the signature, so the wrapper shows the command's
    own parameters (less `pki`) followed by the shared options, declared once above.
    """
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values()]
    shared = [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=None, annotation=ann)
        for name, ann in _PKI_OPTIONS.items()
    ]

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        pki = PkiOptions(**{name: kwargs.pop(name) for name in _PKI_OPTIONS})
        command(pki=pki, **kwargs)

    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.name != "pki"]
    wrapper.__signature__ = inspect.Signature(params + shared)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params + shared}
    return wrapper


@ca_app.command("init")
def ca_init_cmd(
    ca_dir: CaDir,
    key_type: Annotated[str, typer.Option("--key-type", help="Key type of the CA.")] = "ecdsa-p256",
    days: Annotated[int, typer.Option("--days", help="CA lifetime in days.")] = 3650,
    cn: Annotated[
        str | None, typer.Option("--cn", help="CA common name (default: dated, unique).")
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing CA.")] = False,
) -> None:
    """Create the cluster CA: CA_DIR/typhaca.crt and CA_DIR/typhaca.key."""
    from typhapki.commands.ca_init import ca_init

    run(lambda: ca_init(ca_dir, key_type, days, cn, force))


@app.command("issue")
@with_pki_options
def issue_cmd(
    *,
    ca_dir: CaDir,
    out: Out,
    role: Role = "both",
    pki: PkiOptions,
    trust: Trust = None,
    json_out: Json = False,
    hiera: Hiera = None,
    cluster: Cluster = None,
) -> None:
    """Make sure OUT holds a valid, fresh Typha and/or Felix set signed by the CA."""
    from typhapki.commands.issue import issue

    run(lambda: issue(ca_dir, out, role, pki, trust or [], json_out, hiera, cluster))


@app.command("check")
@with_pki_options
def check_cmd(
    *,
    out: Out,
    role: Role = "both",
    ca_dir: Annotated[
        Path | None,
        typer.Option(
            "--ca-dir", help="Also require leaves signed by this CA and the bundle to match."
        ),
    ] = None,
    pki: PkiOptions,
    trust: Trust = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print nothing when valid.")] = False,
    hiera: Hiera = None,
    cluster: Cluster = None,
) -> None:
    """Exit 0 when the set is valid and fresh, 1 (one line per problem) when `issue` is needed."""
    from typhapki.commands.check import check

    run(lambda: check(out, role, pki, ca_dir, trust or [], quiet, hiera, cluster))


@app.command("inspect")
def inspect_cmd(
    paths: Annotated[list[Path], typer.Argument(help="Certificate or bundle files.")],
    json_out: Json = False,
) -> None:
    """Show subject, identities, EKU, issuer, serial, fingerprint and validity."""
    from typhapki.commands.inspect_cmd import inspect

    run(lambda: inspect(paths, json_out))


@app.command("rollback")
def rollback_cmd(
    out: Out,
    role: Role = "both",
    bundle: Annotated[
        bool, typer.Option("--bundle", help="Also roll back the CA bundle (not during a rotation).")
    ] = False,
) -> None:
    """Make the previous certificate set live again (kept by every `issue`)."""
    from typhapki.commands.rollback import rollback

    run(lambda: rollback(out, role, bundle))


# `facts` takes every value as text and accepts stray arguments: whatever the facts.d
# wrapper passes, the fact reports the mistake (exit 0) instead of failing Facter.
@app.command(
    "facts",
    context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
)
def facts_cmd(
    ctx: typer.Context,
    out: Annotated[str | None, typer.Option("--out", help="Output directory of the set.")] = None,
    role: Annotated[str, typer.Option("--role", help="typha, felix or both.")] = "both",
    ca_dir: Annotated[
        str | None, typer.Option("--ca-dir", help="Also judge the set against this CA.")
    ] = None,
    trust: Annotated[
        list[str] | None, typer.Option("--trust", help="Extra CA kept in the bundle.")
    ] = None,
    ferm_output: Annotated[
        str | None, typer.Option("--ferm-output", help="The managed ferm rule file.")
    ] = None,
    hiera: Annotated[
        str | None, typer.Option("--hiera", help="Hiera file (with --cluster).")
    ] = None,
    cluster: Annotated[str | None, typer.Option("--cluster", help="Cluster name in it.")] = None,
    typha_cn: Annotated[str | None, typer.Option("--typha-cn")] = None,
    felix_cn: Annotated[str | None, typer.Option("--felix-cn")] = None,
    typha_uri_san: Annotated[str | None, typer.Option("--typha-uri-san")] = None,
    felix_uri_san: Annotated[str | None, typer.Option("--felix-uri-san")] = None,
    key_type: Annotated[str | None, typer.Option("--key-type")] = None,
    days: Annotated[str | None, typer.Option("--days")] = None,
    renew_before: Annotated[str | None, typer.Option("--renew-before")] = None,
    key_owner: Annotated[str | None, typer.Option("--key-owner")] = None,
    key_group: Annotated[str | None, typer.Option("--key-group")] = None,
    key_mode: Annotated[str | None, typer.Option("--key-mode")] = None,
) -> None:
    """Print the `typhapki` Facter external fact (JSON); always exit 0."""
    from typhapki.commands.facts import RawFactOptions, facts

    raw = RawFactOptions(
        out=out,
        role=role,
        ca_dir=ca_dir,
        trust=trust or [],
        ferm_output=ferm_output,
        hiera=hiera,
        cluster=cluster,
        typha_cn=typha_cn,
        felix_cn=felix_cn,
        typha_uri_san=typha_uri_san,
        felix_uri_san=felix_uri_san,
        key_type=key_type,
        days=days,
        renew_before=renew_before,
        key_owner=key_owner,
        key_group=key_group,
        key_mode=key_mode,
        extra_args=list(ctx.args),
    )
    run(lambda: facts(raw))


# --- manifests and rotate-ca (issue 5) ---
@app.command("manifests")
def manifests_cmd(
    out: Out,
    fmt: Annotated[
        str, typer.Option("--format", help="hardway (Calico's guide) or operator (tigera).")
    ] = "hardway",
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Default: kube-system / tigera-operator."),
    ] = None,
    identity: Annotated[
        str | None,
        typer.Option("--identity", help="cn or uri-san; default: what both leaves carry."),
    ] = None,
    wiring: Annotated[
        bool,
        typer.Option("--wiring", help="Print hostPath + env patches for calico-typha/-node."),
    ] = False,
) -> None:
    """Print Kubernetes YAML from the verified set under OUT (exit 1 if the set is invalid)."""
    from typhapki.commands.manifests import manifests

    run(lambda: manifests(out, fmt, namespace, identity, wiring))


@app.command("rotate-ca")
@with_pki_options
def rotate_ca_cmd(
    *,
    stage: Annotated[
        str, typer.Option("--stage", help="trust-new, reissue or drop-old (docs/rotation.md).")
    ],
    ca_dir: Annotated[Path, typer.Option("--ca-dir", help="The CA being rotated out.")],
    new_ca_dir: Annotated[Path, typer.Option("--new-ca-dir", help="The CA rotated in.")],
    out: Out,
    role: Role = "both",
    pki: PkiOptions,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 0 if OUT is at the stage, 1 if not.")
    ] = False,
    allow_rollback: Annotated[
        bool, typer.Option("--allow-rollback", help="Allow going back one stage.")
    ] = False,
    json_out: Json = False,
) -> None:
    """Move OUT to a CA rotation stage; refuse (exit 3) a skipped or reordered stage."""
    from typhapki.commands.rotate_ca import rotate_ca

    run(
        lambda: rotate_ca(
            stage, ca_dir, new_ca_dir, out, role, pki, check, allow_rollback, json_out
        )
    )


@app.command("lint-hiera")
def lint_hiera_cmd(
    files: Annotated[list[Path], typer.Argument(help="Hiera YAML files (or directories).")],
    offline: Annotated[
        bool, typer.Option("--offline", help="Syntax and validity only, no DNS.")
    ] = False,
    nameserver: Nameservers = None,
    timeout: DnsTimeout = None,
    json_out: Json = False,
) -> None:
    """Check every cluster_nodes / control_plane_nodes entry: valid, and resolving."""
    from typhapki.commands.lint_hiera import lint_hiera

    run(lambda: lint_hiera(files, offline, nameserver or [], json_out, timeout))


@app.command("ferm")
def ferm_cmd(
    hiera: Annotated[
        Path, typer.Option("--hiera", help="Hiera YAML file, or a directory of them.")
    ],
    cluster: Annotated[
        str, typer.Option("--cluster", help="Cluster name in kubernetes::clusters.")
    ],
    mode: Annotated[
        str | None,
        typer.Option("--mode", help="strict (every node address) or relaxed (networks)."),
    ] = None,
    style: Annotated[
        str | None,
        typer.Option("--style", help="plain (domain/chain block) or function (&R_SERVICE)."),
    ] = None,
    port: Annotated[int | None, typer.Option("--port", help="Typha port (default 5473).")] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", help="Write here atomically, only on change (default stdout)."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 0 if --output is up to date, else 1.")
    ] = False,
    templates: Annotated[
        Path | None, typer.Option("--templates", help="Directory of STYLE.ferm.j2 templates.")
    ] = None,
    nameserver: Nameservers = None,
    timeout: DnsTimeout = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", help="DNS queries in flight (default 200).")
    ] = None,
) -> None:
    """Render the Typha ferm rule of a cluster; nothing while any cluster node fails DNS."""
    from typhapki.commands.ferm import FermOptions, ferm

    opts = FermOptions(
        hiera,
        cluster,
        mode,
        style,
        port,
        output,
        check,
        templates,
        tuple(nameserver or ()),
        timeout,
        concurrency,
    )
    run(lambda: ferm(opts))


def main() -> int:
    """Console-script entry point."""
    try:
        app(standalone_mode=True)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
    return 0
