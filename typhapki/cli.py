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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, List, Optional, Union, get_args, get_origin

import typer

from typhapki.errors import EXIT_IO, EXIT_USAGE, TyphapkiError
from typhapki.settings import options
from typhapki.settings.pki import PkiOptions
from typhapki.settings.signer import SignerOptions

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


@dataclass(frozen=True)
class CliState:
    """What main() learnt before parsing: the node configuration file's error, if any."""

    config_error: Optional[str] = None


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


def declared(name: str) -> Any:
    """The typer option of a shared option, from its one declaration
    (typhapki/settings/options.py)."""
    opt = options.BY_NAME[name]
    return typer.Option(opt.default, opt.flag, help=opt.help)


def shared(group: str) -> dict[str, tuple[Any, Any]]:
    """A group of shared options as name -> (annotation, typer option)."""
    return {
        opt.name: (bool if opt.kind is bool else Optional[opt.kind], declared(opt.name))
        for opt in options.group(group)
    }


# Options shared by several commands. Declared in typer's default-value form, which
# typer 0.7 (Debian bookworm) understands as well as the newest releases do; typer 0.7
# knows neither `Annotated` nor `X | None`, hence `Optional` and `List` in this file.
CA_DIR = typer.Option(..., "--ca-dir", help="Directory holding typhaca.crt and typhaca.key.")
OUT = typer.Option(..., "--out", help="Output directory: one subdirectory per pod mount.")
ROLE = typer.Option("both", "--role", help="typha, felix or both.")
TRUST = typer.Option(
    None, "--trust", help="Extra CA certificate to keep in the bundle (rotation). Repeatable."
)
JSON = typer.Option(False, "--json", help="Machine-readable output.")
HIERA = typer.Option(
    None, "--hiera", help="Hiera file or directory: settings from the cluster's typha:."
)
CLUSTER = typer.Option(None, "--cluster", help="Cluster name in --hiera (flags win over it).")

# The DNS gate's options, shared by ferm and lint-hiera.
NAMESERVERS = typer.Option(
    None,
    "--nameserver",
    help="Resolver IP[:PORT], repeatable. Default: $TYPHAPKI_NAMESERVERS, else /etc/resolv.conf.",
)
DNS_TIMEOUT = typer.Option(None, "--timeout", help="Seconds per DNS query (default 2).")

# The mTLS proof a relaxed rule needs, shared by ferm and nft (docs/ferm.md).
PROOF_OUT = declared("out")
TYPHA_ADDRESS = declared("typha_address")
PROOF_LIFETIME = declared("proof_lifetime")
PROOF_TIMEOUT = declared("proof_timeout")
SKIP_MTLS_PROOF = declared("skip_mtls_proof")

# The firewall commands' options, shared by ferm and nft (typhapki/commands/ferm.py).
FW_HIERA = typer.Option(..., "--hiera", help="Hiera YAML file, or a directory of them.")
FW_CLUSTER = typer.Option(..., "--cluster", help="Cluster name in kubernetes::clusters.")
FW_MODE = typer.Option(None, "--mode", help="strict (every node address) or relaxed (networks).")
FW_PORT = typer.Option(None, "--port", help="Typha port (default 5473).")
FW_OUTPUT = typer.Option(
    None, "--output", help="Write here atomically, only on change (default stdout)."
)
FW_CHECK = typer.Option(False, "--check", help="Exit 0 if --output is up to date, else 1.")
FW_CONCURRENCY = typer.Option(None, "--concurrency", help="DNS queries in flight (default 200).")
FW_DNS_GATE = typer.Option(
    None,
    "--dns-gate",
    help="enforce (default: nothing while a node fails DNS) or warn (relaxed rules of "
    "fixed networks only: report the names, write the rule).",
)
FW_STATE_DIR = typer.Option(
    None,
    "--state-dir",
    help="Where ferm.json records each run (default $TYPHAPKI_STATE_DIR or /var/lib/typhapki).",
)

# Which Typha the monitoring commands probe (metrics, check --nagios).
PROBE_ADDRESS = typer.Option(
    None,
    "--probe-address",
    help="Probe the Typha at HOST:PORT. Default: 127.0.0.1:5473 when calico-typha runs here.",
)
NO_PROBE = typer.Option(False, "--no-probe", help="Never probe Typha.")

# The certificate options every PKI command takes (PkiOptions), and how certificates
# get signed (SignerOptions, docs/issuance.md): name -> (type, option).
_PKI_OPTIONS = shared("pki")
_SIGNER_OPTIONS = shared("signer")


def _with_shared(
    param: str, cls: Callable[..., Any], options: dict[str, tuple[Any, Any]]
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Give a command shared options, handed to it as one `param: cls` object.

    typer reads the parameters from the signature, so the wrapper shows the command's
    own parameters (less `param`) followed by the shared options, declared once above.
    """

    def decorate(command: Callable[..., None]) -> Callable[..., None]:
        own = list(inspect.signature(command, eval_str=True).parameters.values())
        shared = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=opt, annotation=ann)
            for name, (ann, opt) in options.items()
        ]

        @functools.wraps(command)
        def wrapper(**kwargs: Any) -> None:
            value = cls(**{name: kwargs.pop(name) for name in options})
            command(**{param: value}, **kwargs)

        params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own if p.name != param]
        wrapper.__signature__ = inspect.Signature(params + shared)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params + shared}
        del wrapper.__wrapped__  # typer must see the signature above, not the wrapped one
        return wrapper

    return decorate


# The certificate options, as `pki: PkiOptions`; the signer options, as `signer: SignerOptions`.
with_pki_options = _with_shared("pki", PkiOptions, _PKI_OPTIONS)
with_signer_options = _with_shared("signer", SignerOptions, _SIGNER_OPTIONS)


@ca_app.command("init")
def ca_init_cmd(
    ca_dir: Path = CA_DIR,
    key_type: str = typer.Option("ecdsa-p256", "--key-type", help="Key type of the CA."),
    days: int = typer.Option(3650, "--days", help="CA lifetime in days."),
    cn: Optional[str] = typer.Option(None, "--cn", help="CA common name (default: dated, unique)."),
    force: bool = declared("force"),
) -> None:
    """Create the cluster CA: CA_DIR/typhaca.crt and CA_DIR/typhaca.key."""
    from typhapki.commands.ca_init import ca_init

    run(lambda: ca_init(ca_dir, key_type, days, cn, force))


@app.command("issue")
@with_signer_options
@with_pki_options
def issue_cmd(
    *,
    ca_dir: Optional[Path] = typer.Option(
        None, "--ca-dir", help="The CA (typhaca.crt, typhaca.key), with --signer local."
    ),
    out: Path = OUT,
    role: str = ROLE,
    pki: PkiOptions,
    signer: SignerOptions,
    trust: Optional[List[Path]] = TRUST,
    json_out: bool = JSON,
    hiera: Optional[Path] = HIERA,
    cluster: Optional[str] = CLUSTER,
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the plan and exit as `check` would; change nothing."
    ),
) -> None:
    """Make sure OUT holds a valid, fresh Typha and/or Felix set, keys made here.

    The local CA (--ca-dir) or cfssl (--signer cfssl) signs; what comes back is
    verified as `check` would before anything is published. Workers without Typha
    need only --role felix.
    """
    from typhapki.commands.issue import issue
    from typhapki.settings.desired import Request

    request = Request(out, role, pki, signer, ca_dir, tuple(trust or ()), hiera, cluster)
    run(lambda: issue(request, json_out, dry_run))


@app.command("check")
@with_signer_options
@with_pki_options
def check_cmd(
    *,
    out: Path = OUT,
    role: str = ROLE,
    ca_dir: Optional[Path] = typer.Option(
        None, "--ca-dir", help="Also require leaves signed by this CA and the bundle to match."
    ),
    pki: PkiOptions,
    signer: SignerOptions,
    trust: Optional[List[Path]] = TRUST,
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing when valid."),
    hiera: Optional[Path] = HIERA,
    cluster: Optional[str] = CLUSTER,
    nagios: bool = typer.Option(
        False,
        "--nagios",
        help="Monitoring-plugins output: one status line; exit 0 OK, 1 WARNING, 2 CRITICAL, "
        "3 UNKNOWN.",
    ),
    probe_address: Optional[str] = PROBE_ADDRESS,
    no_probe: bool = NO_PROBE,
    warning: Optional[str] = typer.Option(
        None,
        "--warning",
        help="With --nagios: WARNING under this much time left (e.g. 7d). Default: renewal "
        "overdue past a grace.",
    ),
    critical: Optional[str] = typer.Option(
        None,
        "--critical",
        help="With --nagios: CRITICAL under this much time left (e.g. 2d). Default: a tenth "
        "of the lifetime.",
    ),
    source: Optional[Path] = typer.Option(
        None, "--from", help="Shipped mode: exit 0 when `install --from DIR` would change nothing."
    ),
) -> None:
    """Exit 0 when `issue` would change nothing, 1 (one line per problem) when it would.

    Takes issue's options and judges by the same desired state, so Puppet's `unless`
    agrees with `issue`: with cfssl, against its current CA (cached for --cfssl-ca-ttl);
    3 and 5 as `issue` would exit. With --nagios: one monitoring-plugins status line
    (docs/monitoring.md).
    """
    if nagios:
        from typhapki.commands.check_nagios import check_nagios

        run(
            lambda: check_nagios(
                out,
                role,
                pki,
                ca_dir,
                trust or [],
                hiera,
                cluster,
                probe_address,
                no_probe,
                warning,
                critical,
            )
        )
    if warning is not None or critical is not None:
        from typhapki.commands.check_nagios import thresholds_without_nagios

        run(thresholds_without_nagios)
    from typhapki.commands.check import check
    from typhapki.settings.desired import Request

    request = Request(out, role, pki, signer, ca_dir, tuple(trust or ()), hiera, cluster, source)
    run(lambda: check(request, quiet))


@app.command("install")
@with_pki_options
def install_cmd(
    *,
    out: Path = OUT,
    role: str = ROLE,
    source: Optional[Path] = typer.Option(
        None, "--from", help="A shipped set: a directory in the layout `issue --out` writes."
    ),
    cert: Optional[Path] = typer.Option(
        None, "--cert", help="A certificate signed elsewhere for the key `request` staged."
    ),
    bundle: Optional[Path] = typer.Option(
        None, "--bundle", help="With --cert: the CA bundle to install (default: the live one)."
    ),
    pki: PkiOptions,
    json_out: bool = JSON,
    hiera: Optional[Path] = HIERA,
    cluster: Optional[str] = CLUSTER,
) -> None:
    """Verify a set or certificate made elsewhere, then publish it atomically into OUT."""
    from typhapki.commands.install import install

    run(lambda: install(out, role, source, cert, bundle, pki, json_out, hiera, cluster))


@app.command("request")
@with_pki_options
def request_cmd(
    *,
    out: Path = OUT,
    role: str = typer.Option(..., "--role", help="typha or felix."),
    csr_out: Optional[Path] = typer.Option(
        None, "--csr-out", help="Write the CSR here (default: print it)."
    ),
    pki: PkiOptions,
    hiera: Optional[Path] = HIERA,
    cluster: Optional[str] = CLUSTER,
) -> None:
    """Stage the node's key for ROLE inside OUT (0600, not yet live) and print its CSR."""
    from typhapki.commands.request import request

    run(lambda: request(out, role, csr_out, pki, hiera, cluster))


@app.command("sign")
@with_pki_options
def sign_cmd(
    *,
    ca_dir: Path = CA_DIR,
    csr: Path = typer.Option(..., "--csr", help="The node's CSR (PEM)."),
    role: str = typer.Option(..., "--role", help="typha or felix."),
    cert_out: Optional[Path] = typer.Option(
        None, "--cert-out", help="Write the certificate here (default: print it)."
    ),
    pki: PkiOptions,
    hiera: Optional[Path] = HIERA,
    cluster: Optional[str] = CLUSTER,
) -> None:
    """Sign a node's CSR: identity, EKU and lifetime from the settings, never the CSR."""
    from typhapki.commands.sign import sign

    run(lambda: sign(ca_dir, csr, role, cert_out, pki, hiera, cluster))


@app.command("inspect")
def inspect_cmd(
    paths: List[Path] = typer.Argument(..., help="Certificate or bundle files."),
    json_out: bool = JSON,
) -> None:
    """Show subject, identities, EKU, issuer, serial, fingerprint and validity."""
    from typhapki.commands.inspect_cmd import inspect

    run(lambda: inspect(paths, json_out))


@app.command("rollback")
def rollback_cmd(
    out: Path = OUT,
    role: Optional[str] = typer.Option(
        None, "--role", help="typha, felix or both. Default: the sets OUT holds."
    ),
    bundle: bool = typer.Option(
        False, "--bundle", help="Also roll back the CA bundle (not during a rotation)."
    ),
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
    out: Optional[str] = typer.Option(None, "--out", help="Output directory of the set."),
    role: str = typer.Option("both", "--role", help="typha, felix or both."),
    ca_dir: Optional[str] = typer.Option(
        None, "--ca-dir", help="Also judge the set against this CA."
    ),
    trust: Optional[List[str]] = typer.Option(None, "--trust", help="Extra CA kept in the bundle."),
    ferm_output: Optional[str] = typer.Option(
        None, "--ferm-output", help="The managed ferm rule file."
    ),
    state_dir: Optional[str] = typer.Option(
        None, "--state-dir", help="Where `ferm` records its runs (default as for ferm)."
    ),
    hiera: Optional[str] = typer.Option(None, "--hiera", help="Hiera file (with --cluster)."),
    cluster: Optional[str] = typer.Option(None, "--cluster", help="Cluster name in it."),
    typha_cn: Optional[str] = typer.Option(None, "--typha-cn"),
    felix_cn: Optional[str] = typer.Option(None, "--felix-cn"),
    typha_uri_san: Optional[str] = typer.Option(None, "--typha-uri-san"),
    felix_uri_san: Optional[str] = typer.Option(None, "--felix-uri-san"),
    key_type: Optional[str] = typer.Option(None, "--key-type"),
    days: Optional[str] = typer.Option(None, "--days"),
    renew_before: Optional[str] = typer.Option(None, "--renew-before"),
    key_owner: Optional[str] = typer.Option(None, "--key-owner"),
    key_group: Optional[str] = typer.Option(None, "--key-group"),
    key_mode: Optional[str] = typer.Option(None, "--key-mode"),
    node_name: Optional[str] = typer.Option(None, "--node-name"),
    probe_address: Optional[str] = PROBE_ADDRESS,
    no_probe: bool = NO_PROBE,
) -> None:
    """Print the `typhapki` Facter external fact (JSON); always exit 0."""
    from typhapki.commands.facts import RawFactOptions, facts

    raw = RawFactOptions(
        out=out,
        role=role,
        ca_dir=ca_dir,
        trust=trust or [],
        ferm_output=ferm_output,
        state_dir=state_dir,
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
        node_name=node_name,
        probe_address=probe_address,
        no_probe=no_probe,
        extra_args=list(ctx.args),
        config_error=ctx.obj.config_error if isinstance(ctx.obj, CliState) else None,
    )
    run(lambda: facts(raw))


# --- manifests and rotate-ca (issue 5) ---
@app.command("manifests")
def manifests_cmd(
    out: Path = OUT,
    fmt: str = typer.Option(
        "hardway", "--format", help="hardway (Calico's guide) or operator (tigera)."
    ),
    namespace: Optional[str] = typer.Option(
        None, "--namespace", help="Default: kube-system / tigera-operator."
    ),
    identity: Optional[str] = typer.Option(
        None, "--identity", help="cn or uri-san; default: what both leaves carry."
    ),
    wiring: bool = typer.Option(
        False, "--wiring", help="Print hostPath + env patches for calico-typha/-node."
    ),
    wiring_dir: Optional[Path] = typer.Option(
        None,
        "--wiring-dir",
        help="Write the patches to DIR/typha.yaml and DIR/node.yaml (one per target).",
    ),
    kustomize_dir: Optional[Path] = typer.Option(
        None,
        "--kustomize-dir",
        help="Write the wiring as DIR/kustomization.yaml over --kustomize-base.",
    ),
    kustomize_base: Optional[str] = typer.Option(
        None,
        "--kustomize-base",
        help="Calico's manifests (a file under DIR, or a kustomization directory), from DIR.",
    ),
    post_render: bool = typer.Option(
        False,
        "--post-render",
        help="Helm post-renderer: patch the rendered manifests on stdin, print them.",
    ),
    typha_uid: Optional[int] = typer.Option(
        None, "--typha-uid", help="uid Typha runs as (default 10001): the Typha key's owner."
    ),
    typha_gid: Optional[int] = typer.Option(
        None, "--typha-gid", help="gid Typha runs as (default 10001): the Typha key's group."
    ),
) -> None:
    """Print Kubernetes YAML from the verified set under OUT (exit 1 if the set is invalid)."""
    from typhapki.commands.manifests import manifests

    run(
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
        )
    )


@app.command("rotate-ca")
@with_pki_options
def rotate_ca_cmd(
    *,
    stage: str = typer.Option(
        ..., "--stage", help="trust-new, reissue or drop-old (docs/rotation.md)."
    ),
    ca_dir: Path = typer.Option(..., "--ca-dir", help="The CA being rotated out."),
    new_ca_dir: Path = typer.Option(..., "--new-ca-dir", help="The CA rotated in."),
    out: Path = OUT,
    role: str = ROLE,
    pki: PkiOptions,
    check: bool = typer.Option(False, "--check", help="Exit 0 if OUT is at the stage, 1 if not."),
    allow_rollback: bool = declared("allow_rollback"),
    json_out: bool = JSON,
    hiera: Optional[Path] = HIERA,
    cluster: Optional[str] = CLUSTER,
) -> None:
    """Move OUT to a CA rotation stage; refuse (exit 3) a skipped or reordered stage."""
    from typhapki.commands.rotate_ca import rotate_ca

    run(
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
        )
    )


@app.command("restarted")
def restarted_cmd(
    out: Path = OUT,
    component: str = typer.Option(..., "--component", help="typha or felix."),
) -> None:
    """Clear OUT/.restart-COMPONENT once that component was restarted."""
    from typhapki.commands.restarted import restarted

    run(lambda: restarted(out, component))


@app.command("restart-typha")
def restart_typha_cmd(
    out: Path = OUT,
    kubeconfig: Path = typer.Option(
        ..., "--kubeconfig", help="Kubeconfig allowed to list pods and create pods/eviction."
    ),
    namespace: str = typer.Option(
        "kube-system", "--namespace", help="Typha's namespace (calico-system under the operator)."
    ),
    node: Optional[str] = typer.Option(
        None, "--node", help="This node's Kubernetes name (default: the host name)."
    ),
    context: Optional[str] = typer.Option(
        None, "--context", help="Kubeconfig context (default: its current-context)."
    ),
    timeout: float = typer.Option(30.0, "--timeout", help="Seconds for all API requests."),
) -> None:
    """Evict this node's Typha pod while OUT/.restart-typha is set, as the
    PodDisruptionBudget allows (exit 6: refused for now, the marker stays)."""
    from typhapki.commands.restart_typha import restart_typha

    run(lambda: restart_typha(out, kubeconfig, namespace, node, context, timeout))


@app.command("metrics")
@with_pki_options
def metrics_cmd(
    *,
    out: Path = OUT,
    role: str = ROLE,
    ca_dir: Optional[Path] = typer.Option(
        None, "--ca-dir", help="Also judge the set against this CA (as `check --ca-dir`)."
    ),
    pki: PkiOptions,
    trust: Optional[List[Path]] = TRUST,
    hiera: Optional[Path] = HIERA,
    cluster: Optional[str] = CLUSTER,
    textfile_dir: Optional[Path] = typer.Option(
        None,
        "--textfile-dir",
        help="Write DIR/typhapki.prom atomically for node_exporter (default: print).",
    ),
    state_dir: Optional[Path] = typer.Option(
        None,
        "--state-dir",
        help="Where `ferm` keeps ferm.json. Default $TYPHAPKI_STATE_DIR or /var/lib/typhapki.",
    ),
    probe_address: Optional[str] = PROBE_ADDRESS,
    no_probe: bool = NO_PROBE,
) -> None:
    """Prometheus metrics: expiry, validity, rotation, restart pending, probe, ferm state."""
    from typhapki.commands.metrics import metrics

    run(
        lambda: metrics(
            out,
            role,
            pki,
            ca_dir,
            trust or [],
            hiera,
            cluster,
            textfile_dir,
            state_dir,
            probe_address,
            no_probe,
        )
    )


@app.command("probe")
def probe_cmd(
    address: str = typer.Option(
        "127.0.0.1:5473", "--address", help="Typha to probe, HOST:PORT or [IPV6]:PORT."
    ),
    out: Path = OUT,
    typha_cn: Optional[str] = _PKI_OPTIONS["typha_cn"][1],
    typha_uri_san: Optional[str] = _PKI_OPTIONS["typha_uri_san"][1],
    hiera: Optional[Path] = HIERA,
    cluster: Optional[str] = CLUSTER,
    timeout: float = typer.Option(5.0, "--timeout", help="Seconds for connect and handshake."),
    json_out: bool = JSON,
) -> None:
    """Handshake with Typha as this node's Felix: exit 0 when it serves the certificate on disk."""
    from typhapki.commands.probe import probe
    from typhapki.settings.pki import PkiOptions as Options

    pki = Options(typha_cn=typha_cn, typha_uri_san=typha_uri_san)
    run(lambda: probe(address, out, pki, hiera, cluster, timeout, json_out))


@app.command("lint-hiera")
def lint_hiera_cmd(
    files: List[Path] = typer.Argument(..., help="Hiera YAML files (or directories)."),
    offline: bool = typer.Option(False, "--offline", help="Syntax and validity only, no DNS."),
    nameserver: Optional[List[str]] = NAMESERVERS,
    timeout: Optional[float] = DNS_TIMEOUT,
    json_out: bool = JSON,
) -> None:
    """Check every cluster_nodes / control_plane_nodes entry: valid, and resolving."""
    from typhapki.commands.lint_hiera import lint_hiera

    run(lambda: lint_hiera(files, offline, nameserver or [], json_out, timeout))


def _gate_values(
    mode: Optional[str],
    port: Optional[int],
    output: Optional[Path],
    check: bool,
    nameserver: Optional[List[str]],
    timeout: Optional[float],
    concurrency: Optional[int],
    dns_gate: Optional[str],
    state_dir: Optional[Path],
    out: Optional[Path],
    typha_address: Optional[str],
    proof_lifetime: Optional[int],
    proof_timeout: Optional[float],
    skip_mtls_proof: bool,
) -> dict[str, Any]:
    """The firewall commands' shared values, as GateOptions fields."""
    return {
        "mode": mode,
        "port": port,
        "output": output,
        "check": check,
        "nameservers": tuple(nameserver or ()),
        "timeout": timeout,
        "concurrency": concurrency,
        "dns_gate": dns_gate,
        "state_dir": state_dir,
        "out": out,
        "typha_address": typha_address,
        "proof_lifetime": proof_lifetime,
        "proof_timeout": proof_timeout,
        "skip_mtls_proof": skip_mtls_proof,
    }


@app.command("ferm")
def ferm_cmd(
    hiera: Path = FW_HIERA,
    cluster: str = FW_CLUSTER,
    mode: Optional[str] = FW_MODE,
    style: Optional[str] = typer.Option(
        None, "--style", help="plain (domain/chain block) or function (&R_SERVICE)."
    ),
    port: Optional[int] = FW_PORT,
    output: Optional[Path] = FW_OUTPUT,
    check: bool = FW_CHECK,
    templates: Optional[Path] = typer.Option(
        None, "--templates", help="Directory of STYLE.ferm.j2 templates."
    ),
    nameserver: Optional[List[str]] = NAMESERVERS,
    timeout: Optional[float] = DNS_TIMEOUT,
    concurrency: Optional[int] = FW_CONCURRENCY,
    dns_gate: Optional[str] = FW_DNS_GATE,
    state_dir: Optional[Path] = FW_STATE_DIR,
    out: Optional[Path] = PROOF_OUT,
    typha_address: Optional[str] = TYPHA_ADDRESS,
    proof_lifetime: Optional[int] = PROOF_LIFETIME,
    proof_timeout: Optional[float] = PROOF_TIMEOUT,
    skip_mtls_proof: bool = SKIP_MTLS_PROOF,
) -> None:
    """Render the Typha ferm rule of a cluster; nothing while any cluster node fails DNS."""
    from typhapki.commands.ferm import FermOptions, ferm

    opts = FermOptions(
        hiera=hiera,
        cluster=cluster,
        style=style,
        templates=templates,
        **_gate_values(
            mode, port, output, check, nameserver, timeout, concurrency, dns_gate, state_dir,
            out, typha_address, proof_lifetime, proof_timeout, skip_mtls_proof,
        ),
    )  # fmt: skip
    run(lambda: ferm(opts))


@app.command("nft")
def nft_cmd(
    hiera: Path = FW_HIERA,
    cluster: str = FW_CLUSTER,
    mode: Optional[str] = FW_MODE,
    port: Optional[int] = FW_PORT,
    output: Optional[Path] = FW_OUTPUT,
    check: bool = FW_CHECK,
    sets_only: bool = typer.Option(
        False, "--sets-only", help="Only the set update (flush set + add element) for nft -f."
    ),
    nameserver: Optional[List[str]] = NAMESERVERS,
    timeout: Optional[float] = DNS_TIMEOUT,
    concurrency: Optional[int] = FW_CONCURRENCY,
    dns_gate: Optional[str] = FW_DNS_GATE,
    state_dir: Optional[Path] = FW_STATE_DIR,
    out: Optional[Path] = PROOF_OUT,
    typha_address: Optional[str] = TYPHA_ADDRESS,
    proof_lifetime: Optional[int] = PROOF_LIFETIME,
    proof_timeout: Optional[float] = PROOF_TIMEOUT,
    skip_mtls_proof: bool = SKIP_MTLS_PROOF,
) -> None:
    """Render the Typha rule of a cluster for nftables (named sets, accept rules); nothing
    while any cluster node fails DNS."""
    from typhapki.commands.nft import NftOptions, nft

    opts = NftOptions(
        hiera=hiera,
        cluster=cluster,
        sets_only=sets_only,
        **_gate_values(
            mode, port, output, check, nameserver, timeout, concurrency, dns_gate, state_dir,
            out, typha_address, proof_lifetime, proof_timeout, skip_mtls_proof,
        ),
    )  # fmt: skip
    run(lambda: nft(opts))


def _node_defaults(argv: List[str]) -> tuple[dict[str, Any], Optional[str]]:
    """click's default_map from the node configuration file, and its error if any.

    `facts` never fails (its error goes into the fact), `--help` always helps and
    `--version` always answers;
    every other command stops with one line when the file is unusable.
    """
    from typhapki import nodeconfig

    try:
        config = nodeconfig.load(nodeconfig.config_path())
        if config.path is None:  # no file: skip building click's tree (~60 ms)
            return {}, None
        return nodeconfig.default_map(config, typer.main.get_command(app)), None
    except TyphapkiError as exc:
        if argv[:1] == ["facts"] or "--help" in argv or argv[:1] == ["--version"]:
            return {}, str(exc)
        print(f"typhapki: error: {exc}", file=sys.stderr)
        raise SystemExit(exc.exit_code) from None


# --- the fast path of the commands Puppet runs on every agent run ---------------------
# `check` (an exec's unless) and `facts` (a Facter fact) run on every node every 30
# minutes, `metrics` (the systemd timer) every 5. typer >= 0.29 converts each option
# through pydantic at parse time, which costs ~100 ms per run (docs/performance.md,
# bench/bench_libsets.py). For a plain command line of these commands, main() hands the
# callback the same keyword arguments typer would, read from the callback's own
# typer.Option declarations; anything else (--help, an unknown, repeated or malformed
# option, a value that does not convert, a missing required option) goes to typer,
# which parses it and reports it as usual.
FAST_COMMANDS = ("check", "facts", "metrics")
_FAST_TYPES: tuple[type, ...] = (str, Path, int, float)


@dataclass(frozen=True)
class _FastOption:
    """One option of a fast-path command, read from its typer declaration."""

    name: str  # the callback's parameter
    kind: type  # str, Path, int, float or bool (a flag)
    multiple: bool


def _fast_options(
    callback: Callable[..., Any], obj: Any = None
) -> tuple[dict[str, _FastOption], dict[str, Any]]:
    """Option string -> option, and the callback's defaults, from its typer declarations.
    Raises LookupError for a declaration the fast path does not handle."""
    options: dict[str, _FastOption] = {}
    defaults: dict[str, Any] = {}
    for param in inspect.signature(callback, eval_str=True).parameters.values():
        info = param.default
        if param.annotation is typer.Context:
            defaults[param.name] = SimpleNamespace(args=[], obj=obj)  # what facts reads
            continue
        if not isinstance(info, typer.models.OptionInfo):
            raise LookupError(param.name)
        kind, multiple = param.annotation, False
        if get_origin(kind) is Union:  # Optional[X]
            (kind,) = [a for a in get_args(kind) if a is not type(None)]
        if get_origin(kind) in (list, List):
            (kind,) = get_args(kind)
            multiple = True
        decls = list(info.param_decls or ())
        if kind not in (*_FAST_TYPES, bool) or any("/" in d for d in decls) or not decls:
            raise LookupError(param.name)
        if kind is bool and (multiple or info.default is not False):
            raise LookupError(param.name)
        for decl in decls:
            options[decl] = _FastOption(param.name, kind, multiple)
        defaults[param.name] = info.default
    return options, defaults


def _fast_value(option: _FastOption, value: Any) -> Any:
    """A value as typer would hand it to the callback; ValueError if unsure."""
    if option.kind is bool:
        if not isinstance(value, bool):
            raise ValueError(value)
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(value)
    if option.kind in (str, Path) and not isinstance(value, str):
        raise ValueError(value)  # typer 0.7 takes 30 for a path, typer 0.29 refuses it
    text = str(value)
    if not text or text.startswith("-"):
        raise ValueError(text)  # missing, empty or option-like: typer decides
    return option.kind(text)


def fast_parse(
    argv: list[str], default_map: Mapping[str, Any] | None = None, obj: Any = None
) -> tuple[Callable[..., Any], dict[str, Any]] | None:
    """The callback and its keyword arguments for a plain `check`/`facts`/`metrics` line,
    or None when typer must parse it. `default_map` and `obj` as click's (the node
    configuration file's defaults: flags win)."""
    if not argv or argv[0] not in FAST_COMMANDS:
        return None
    callback = next(c.callback for c in app.registered_commands if c.name == argv[0])
    if callback is None:
        return None
    try:
        options, kwargs = _fast_options(callback, obj)
        by_name = {o.name: o for o in options.values()}
        for name, value in dict((default_map or {}).get(argv[0], {})).items():
            configured = by_name[name]  # KeyError: not an option of ours
            if configured.multiple:
                if not isinstance(value, list | tuple):
                    return None
                kwargs[name] = [_fast_value(configured, v) for v in value]
            else:
                kwargs[name] = _fast_value(configured, value)
    except (LookupError, ValueError, TypeError):
        return None
    given: set[str] = set()
    args = iter(argv[1:])
    for token in args:
        decl, eq, value = token.partition("=") if token.startswith("--") else (token, "", "")
        option = options.get(decl)
        if option is None:
            return None  # --help, a positional or unknown word, -abc
        if option.name in given and not option.multiple:
            return None
        if option.kind is bool:
            if eq:
                return None
            kwargs[option.name] = True
            given.add(option.name)
            continue
        if not eq:
            value = next(args, "")
        try:
            converted = _fast_value(option, value)
        except ValueError:
            return None
        if option.multiple:  # flags replace the configured list, as with click
            earlier = kwargs[option.name] if option.name in given else []
            kwargs[option.name] = [*(earlier or []), converted]
        else:
            kwargs[option.name] = converted
        given.add(option.name)
    if any(v is ... for v in kwargs.values()):
        return None  # a required option is missing
    return callback, kwargs


def main() -> int:
    """Console-script entry point.

    Whatever main() hands typer (a default_map, an obj) it hands fast_parse() too: the
    tests compare both paths with the same default_map (tests/test_cli_fast_path.py).
    """
    try:
        defaults, config_error = _node_defaults(sys.argv[1:])
        state = CliState(config_error)
        if not os.environ.get("TYPHAPKI_NO_FAST_PATH"):
            fast = fast_parse(sys.argv[1:], defaults, state)
            if fast is not None:
                callback, kwargs = fast
                try:
                    callback(**kwargs)
                except typer.Exit as exc:
                    return int(exc.exit_code)
                return 0
        app(standalone_mode=True, default_map=defaults, obj=state)
    except SystemExit as exc:
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else EXIT_USAGE)
    return 0
