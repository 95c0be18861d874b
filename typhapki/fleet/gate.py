"""The hiera repository's rotation gate: which clusters a change moves to which stage.

A change advances a cluster's CA rotation (docs/rotation.md) when it
- adds an entry to the cluster's `typha: trust` (trust-new starts: every member must
  be at no rotation, stage `none`),
- moves its signer: `typha: cfssl_label`, or `pki_intermediate_base` when `typha:`
  names no label (reissue: every member must have reached trust-new),
- removes an entry from `typha: trust` (drop-old: every member must have reached
  reissue).
Defaults (`kubernetes::clusters_defaults`) are merged in first, so a change to the
defaults advances every cluster it reaches. Pure: the trees are loaded here, PuppetDB
is asked by the caller.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from typhapki.puppet.hiera import YNode, clusters_map, load_hiera, merged_cluster_node
from typhapki.record import record


@record(frozen=True)
class RotationKeys:
    """The values of one cluster that a rotation moves."""

    trust: frozenset[str]  # each entry as canonical JSON
    signer: str | None  # typha.cfssl_label, else pki_intermediate_base


@record(frozen=True)
class Advance:
    """A cluster moved to `stage`; `requires` is the stage every member must show."""

    cluster: str
    stage: str
    requires: str
    what: str  # the change, for the message


def _plain(node: YNode | None) -> Any:
    if node is None:
        return None
    if isinstance(node.value, dict):
        return {k: _plain(v) for k, v in node.value.items()}
    if isinstance(node.value, list):
        return [_plain(v) for v in node.value]
    return node.value


def rotation_keys(hiera: Path) -> dict[str, RotationKeys]:
    """cluster name -> its rotation keys, defaults merged, from a hiera file or directory."""
    doc = load_hiera(hiera)
    keys: dict[str, RotationKeys] = {}
    for name, (_group, node) in clusters_map(doc).items():
        merged = _plain(merged_cluster_node(doc, node))
        typha = merged.get("typha") if isinstance(merged, dict) else None
        typha = typha if isinstance(typha, dict) else {}
        trust = typha.get("trust")
        entries = trust if isinstance(trust, list) else ([] if trust is None else [trust])
        label = typha.get("cfssl_label") or merged.get("pki_intermediate_base")
        keys[name] = RotationKeys(
            frozenset(json.dumps(e, sort_keys=True) for e in entries),
            None if label is None else str(label),
        )
    return keys


def advances(old: dict[str, RotationKeys], new: dict[str, RotationKeys]) -> list[Advance]:
    """What the change from OLD to NEW does to each cluster's rotation (none: [])."""
    found: list[Advance] = []
    for name in sorted(new):
        before, after = old.get(name), new[name]
        if before is None:
            continue  # a new cluster starts wherever it starts
        if after.trust - before.trust:
            found.append(Advance(name, "trust-new", "none", "adds a CA to typha.trust"))
        if after.signer != before.signer:
            found.append(
                Advance(
                    name,
                    "reissue",
                    "trust-new",
                    f"moves the signer from {before.signer!r:.40} to {after.signer!r:.40}",
                )
            )
        if before.trust - after.trust:
            found.append(Advance(name, "drop-old", "reissue", "removes a CA from typha.trust"))
    return found
