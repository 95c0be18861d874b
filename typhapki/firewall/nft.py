"""Rendering the Typha rule for nftables from the same gated sources as the ferm rule.

An ``accept`` in a base chain of typhapki's own would not override a ``drop`` in the
fleet's input chain (every base chain on the hook sees the packet), so the rule lives in
the fleet's own chain. ``render`` writes a fragment the fleet's ruleset includes inside
its ``table inet filter { ... }`` block, after its ``chain input`` (docs/nftables.md):

- two named sets, ``calico_typha_v4`` and ``calico_typha_v6``, with ``flags interval``
  so that addresses and networks mix; a family without sources gets an empty set, which
  matches nothing (nothing is opened to it);
- a named set ``calico_typha_ports``: the Typha ports the live switch's stage opens
  (typhapki/firewall/pipeline.py ``open_ports``), so that a stage change, like a node
  change, is a set update;
- ``chain input { ... }`` adding one accept rule per family for TCP to those ports.

``render_sets`` writes only the set update, for ``nft -f``: ``flush set`` and ``add
element`` of the three sets (after an ``add set`` of each, which changes nothing when
the set exists: a ruleset loaded before the ports set existed gets it). ``nft -f``
applies a file as one transaction, so a connection never sees the sets empty in
between, and the ruleset is not reloaded.

Every source is validated again here (typhapki/inventory/hostnames.py), whatever the
caller did, and overlapping networks are merged (an interval set refuses overlaps),
but never into a network wider than /8 (IPv4) or /32 (IPv6): 10.0.0.0/8 and
11.0.0.0/8 stay two elements, not 10.0.0.0/7 (hostnames.merge_within_bounds). A
ferm variable (relaxed ``network_variable``) has no nftables meaning and is refused.
The output is deterministic: no timestamps, sources in numeric order.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence

from typhapki.errors import ConfigError
from typhapki.firewall.ferm import _NAME, MODES, STAGES, Sources
from typhapki.inventory.hostnames import (
    merge_within_bounds,
    validate_port,
    validate_source_network,
)

TABLE = "inet filter"  # the fleet's table, where `flush set` / `add element` find the sets
CHAIN = "input"
SET_V4 = "calico_typha_v4"
SET_V6 = "calico_typha_v6"
SET_PORTS = "calico_typha_ports"
# Each set's declaration, as the fragment writes it and the set update repeats it.
SET_TYPES = {
    SET_V4: ("ipv4_addr", True),
    SET_V6: ("ipv6_addr", True),
    SET_PORTS: ("inet_service", False),
}


def split_sources(sources: Sources) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(IPv4, IPv6) elements: validated, overlaps merged, numeric order, hosts bare."""
    if sources.variable:
        raise ConfigError(
            f"network_variable {sources.variable}: a ferm variable has no nftables "
            "meaning; give the cluster's networks instead"
        )
    networks = [
        ipaddress.ip_network(validate_source_network(s, "source")) for s in sources.addresses
    ]
    if not networks:
        raise ConfigError("a rule needs source addresses")
    merged = merge_within_bounds(networks)
    return (
        _elements(n for n in merged if n.version == 4),
        _elements(n for n in merged if n.version == 6),
    )


def _elements(networks: Iterable[ipaddress.IPv4Network | ipaddress.IPv6Network]) -> tuple[str, ...]:
    return tuple(
        str(n.network_address) if n.prefixlen == n.max_prefixlen else n.with_prefixlen
        for n in networks
    )


def _ports(ports: Sequence[int]) -> tuple[str, ...]:
    checked = [validate_port(port, "port") for port in ports]
    if not checked or len(set(checked)) != len(checked):
        raise ConfigError(f"ports: expected one or more distinct ports, got {list(ports)}")
    return tuple(str(port) for port in checked)


def _header(
    cluster: str, group: str, mode: str, ports: tuple[str, ...], stage: str, sources: Sources
) -> str:
    if mode not in MODES:
        raise ConfigError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    if stage not in STAGES:
        raise ConfigError(f"tls_stage: expected one of {', '.join(STAGES)}, got {stage!r}")
    for what, name in (("cluster", cluster), ("group", group)):
        if not _NAME.fullmatch(name):
            raise ConfigError(f"{what}: {name!r} is not a valid {what} name")
    # The note is ours, but keep it to one line all the same: nft comments end there.
    note = " ".join(sources.note.split()) or "unspecified"
    service = ", ".join(f"tcp/{port}" for port in ports)
    staged = f", tls_stage {stage}" if stage != "none" else ""
    return (
        "# Managed by typhapki: do not edit, it is rewritten from hiera.\n"
        f"# Calico Typha ({service}) for cluster {cluster} (group {group}), mode {mode}{staged}.\n"
        f"# Sources: {note}.\n"
    )


def _set(name: str, elements: tuple[str, ...]) -> str:
    kind, interval = SET_TYPES[name]
    lines = [f"set {name} {{", f"\ttype {kind}", *(["\tflags interval"] if interval else [])]
    if elements:
        lines += ["\telements = {", *(f"\t\t{e}," for e in elements), "\t}"]
    return "\n".join([*lines, "}"]) + "\n"


def _prepared(
    cluster: str, group: str, mode: str, ports: Sequence[int], sources: Sources, stage: str
) -> tuple[str, tuple[tuple[str, tuple[str, ...]], ...]]:
    """The header, and each set's name and elements (addresses v4, v6, then ports): what
    the whole fragment and the set update both write."""
    checked = _ports(ports)
    header = _header(cluster, group, mode, checked, stage, sources)
    v4, v6 = split_sources(sources)
    return header, ((SET_V4, v4), (SET_V6, v6), (SET_PORTS, checked))


def render(
    *,
    cluster: str,
    group: str,
    mode: str,
    ports: Sequence[int],
    sources: Sources,
    stage: str = "none",
) -> str:
    """The fragment included inside the fleet's `table inet filter` block."""
    header, sets = _prepared(cluster, group, mode, ports, sources, stage)
    return (
        header
        + f"# Include inside `table {TABLE} {{ ... }}`, after its `chain {CHAIN}` (a base chain).\n"
        + "".join(_set(name, elements) for name, elements in sets)
        + f"chain {CHAIN} {{\n"
        + f"\tip saddr @{SET_V4} tcp dport @{SET_PORTS} accept\n"
        + f"\tip6 saddr @{SET_V6} tcp dport @{SET_PORTS} accept\n"
        + "}\n"
    )


def render_sets(
    *,
    cluster: str,
    group: str,
    mode: str,
    ports: Sequence[int],
    sources: Sources,
    stage: str = "none",
) -> str:
    """The set update alone (`nft -f FILE`: one transaction, no ruleset reload)."""
    header, sets = _prepared(cluster, group, mode, ports, sources, stage)
    lines = [f"# Apply with `nft -f`: one transaction on the sets of `table {TABLE}`."]
    for name, elements in sets:
        kind, interval = SET_TYPES[name]
        flags = " flags interval;" if interval else ""
        lines.append(f"add set {TABLE} {name} {{ type {kind};{flags} }}")
        lines.append(f"flush set {TABLE} {name}")
        if elements:  # `add element ... { }` with nothing in it is a syntax error
            lines.append(f"add element {TABLE} {name} {{ {', '.join(elements)} }}")
    return header + "\n".join(lines) + "\n"
