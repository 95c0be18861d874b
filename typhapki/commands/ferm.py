"""`typhapki ferm`: the cluster's Typha rule for ferm, behind the DNS gate
(typhapki/firewall/pipeline.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from typhapki.commands import CommandRequest
from typhapki.firewall.pipeline import GatedRule, GateOptions, emit_text, gated_rule
from typhapki.record import record

if TYPE_CHECKING:
    from typhapki.inventory.hiera import Cluster


@record(frozen=True)
class FermOptions(GateOptions):
    """The gate's options, and how ferm renders the rule."""

    style: str | None = None
    templates: Path | None = None
    ferm_conf: Path | None = None


def ferm(opts: FermOptions) -> int:
    """Render the cluster's Typha rule behind the DNS gate; write, print or check it.

    --kernel compares the rules ferm.conf loads with the kernel's instead (no DNS:
    typhapki/firewall/kernel.py).

    Exit 0: printed, written, unchanged, or (--check) already up to date; with
    ``dns_gate: warn``, also when names did not resolve (one warning line per host).
    Exit 1: the DNS gate failed (one line per failing host, nothing written) or
    --check found the file out of date. Exit 2: bad hiera, template or option, or
    ``warn`` asked for a rule built from node addresses.

    A relaxed rule is written (or --check'ed) only while a proof says the cluster's
    Typha enforces mutual TLS (`_mtls_guard`). A proof that it does not writes the
    strict rule instead, exit 0 (exit 1, the rule left as it is, when the strict rule
    cannot be built); no proof either way leaves the last rule, exit 1.
    """
    from typhapki.firewall import ferm as rules
    from typhapki.firewall.fermconf import DEFAULT_CONF, check_loaded

    if opts.kernel:
        from typhapki.firewall.kernel import ferm_kernel, report
        from typhapki.typhaports import TLS_PORTS

        # The plain and the TLS Typha's ports too: one the file no longer opens
        # (tls_stage retire) must be closed in the kernel as well.
        ports = (opts.port or rules.DEFAULT_PORT, TLS_PORTS.server)
        conf = opts.ferm_conf or DEFAULT_CONF
        return report(opts, lambda output: ferm_kernel(output, conf, ports))

    def prepare(cluster: Cluster, mode: str) -> Callable[[GatedRule], int]:
        style = opts.style or cluster.typha.style or rules.DEFAULT_STYLE
        rules.check_templates(opts.templates, style)
        if opts.output is not None:
            check_loaded(opts.output, opts.ferm_conf)

        def emit(rule: GatedRule) -> int:
            text = rules.render(
                cluster=rule.cluster.name,
                group=rule.cluster.group,
                mode=rule.mode,
                style=style,
                ports=rule.ports,
                sources=rule.sources,
                stage=rule.stage,
                templates=opts.templates,
            )
            return emit_text(opts, text, "ferm rule")

        return emit

    return gated_rule(opts, prepare, (("--style", opts.style, rules.STYLES),))


def run(request: CommandRequest) -> int:
    """`ferm`: every option is a field of FermOptions."""
    return ferm(FermOptions.of(request.values))
