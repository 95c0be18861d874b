"""`typhapki restart-typha`: restart this node's Typha through the eviction API, only
while OUT/.restart-typha says its files changed, and remove the marker once the API
took the eviction (docs/kubernetes.md, "Restarts after renewal")."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from typhapki.commands import CommandRequest


def default_node() -> str:
    """The kubelet's default node name: the host name, lower-cased."""
    return socket.gethostname().lower()


def restart_typha(
    out: Path,
    kubeconfig: Path,
    namespace: str,
    node: str | None,
    context: str | None,
    timeout: float,
    hiera: Path | None = None,
    cluster: str | None = None,
) -> int:
    """Evict this node's Typha of the live switch's stage: hiera's `tls_stage` when
    `hiera` and `cluster` are given (the TLS Typha in parallel, switch and retire, the
    plain one without a stage), else the TLS Typha when this node runs one, else the
    plain one (typhapki/kubernetes/eviction.py `restart_on_node`)."""
    from typhapki.kubernetes.eviction import KubeApi, restart_on_node, valid_namespace, valid_node
    from typhapki.kubernetes.kubeconfig import load_kubeconfig
    from typhapki.kubernetes.typhatarget import typha_target
    from typhapki.pki.restarts import Component, clear_restart, marker_path
    from typhapki.provenance import OptionError
    from typhapki.settings.cluster import load_typha_settings
    from typhapki.settings.wiring import resolve

    named = node is not None  # else this host's name, the default
    node = node if node is not None else default_node()
    for name, value, valid, where in (
        ("namespace", namespace, valid_namespace, ""),
        ("node", node, valid_node, "" if named else "the host name"),
    ):
        try:
            valid(value)
        except ValueError as exc:
            raise OptionError(name, value, str(exc), where=where) from None
    if not 0 < timeout <= 600:
        raise OptionError("timeout", timeout, "not between 0 and 600 seconds")
    # Hiera first, as every command that takes it: a bad one is named even when no
    # restart is pending.
    typha = load_typha_settings(hiera, cluster)
    selector = typha_target(resolve(None, None, None, typha).stage).selector if typha else None
    marker = marker_path(out, Component.TYPHA)
    try:
        changed_at = os.lstat(marker).st_mtime
    except FileNotFoundError:
        print(f"{marker}: no restart pending")
        return 0
    access = load_kubeconfig(kubeconfig, context)
    done = restart_on_node(KubeApi(access, timeout), namespace, node, changed_at, selector)
    clear_restart(out, Component.TYPHA)
    print(f"{done}; {marker} removed")
    return 0


def run(request: CommandRequest) -> int:
    """`restart-typha`."""
    r = request
    return restart_typha(
        r.out, r.kubeconfig, r.namespace, r.node, r.context, r.timeout, r.hiera, r.cluster
    )
