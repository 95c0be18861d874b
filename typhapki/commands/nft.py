from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from typhapki.commands import CommandRequest
from typhapki.errors import ConfigError
from typhapki.firewall.pipeline import GatedRule, GateOptions, emit_text, gated_rule
from typhapki.record import record

if TYPE_CHECKING:
    from typhapki.inventory.hiera import Cluster


@record(frozen=True)
class NftOptions(GateOptions):
    """The gate's options, and whether to write only the set update."""

    sets_only: bool = False


def nft(opts: NftOptions) -> int:
    """The cluster's Typha rule for nftables, behind the same DNS gate as `ferm`.

    Exit codes as `ferm` (docs/exit-codes.md). Without --sets-only: the named sets and
    the accept rules, included by the fleet's ruleset; with it: only the set update.
    With --kernel: whether the loaded sets hold the file's elements
    (typhapki/firewall/kernel.py).
    """
    from typhapki.firewall import nft as rules

    if opts.kernel:  # the loaded sets against the file's (no DNS)
        from typhapki.firewall.kernel import nft_kernel, report

        return report(opts, nft_kernel)
    what = "nft set update" if opts.sets_only else "nft rule"

    def prepare(cluster: Cluster, mode: str) -> Callable[[GatedRule], int]:
        typha = cluster.typha
        if mode == "relaxed" and typha.network_variable and not typha.networks:
            raise ConfigError(
                f"{cluster.where}.typha.network_variable: {typha.network_variable} is a "
                "ferm variable, which nftables cannot use; give networks instead"
            )

        def emit(rule: GatedRule) -> int:
            name, group = rule.cluster.name, rule.cluster.group
            if opts.sets_only:
                text = rules.render_sets(cluster=name, group=group, mode=rule.mode,
                                         ports=rule.ports, sources=rule.sources,
                                         stage=rule.stage)  # fmt: skip
            else:
                text = rules.render(cluster=name, group=group, mode=rule.mode,
                                    ports=rule.ports, sources=rule.sources,
                                    stage=rule.stage)  # fmt: skip
            return emit_text(opts, text, what)

        return emit

    return gated_rule(opts, prepare)


def run(request: CommandRequest) -> int:
    """`nft`: every option is a field of NftOptions."""
    return nft(NftOptions.of(request.values))
