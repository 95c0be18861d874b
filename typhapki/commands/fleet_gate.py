"""`typhapki fleet gate`: refuse a hiera change whose stage move the rule refuses
(typhapki/fleet/moves.py), or whose gate does not pass yet. The tree before the change
is typhapki/fleet/hieradiff.py's, the moves and their gates typhapki/fleet/gate.py's,
the members' facts and the Kubernetes API are reached through typhapki/fleet/access.py.
Exit 0 passes, 1 refused or not judged, 8 PuppetDB failed (docs/exit-codes.md).
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, UsageError
from typhapki.fleet.access import (
    KubeOptions,
    PuppetDBOptions,
    gate_kube_access,
    judged_nodes,
    kube_api,
    max_age,
    puppetdb_client,
    switch_verdict,
)


def fleet_gate(
    opts: PuppetDBOptions,
    hiera: Path,
    base: str | None,
    old: Path | None,
    no_puppetdb: bool,
    kube: KubeOptions | None = None,
) -> int:
    """Refuse (exit 1) a hiera change whose stage move the rule refuses
    (typhapki/fleet/moves.py), or that advances a cluster's rotation or live switch
    before the move's gate passes; with --no-puppetdb, refuse what hiera alone decides,
    warn about the gated moves and pass them."""
    from typhapki.fleet import emergency
    from typhapki.fleet.gate import advances, gate_verdict, rotation_keys, unchecked
    from typhapki.fleet.hieradiff import keys_before
    from typhapki.fleet.moves import EMERGENCY_GATES, SWITCH_GATES
    from typhapki.fleet.nodes import shown
    from typhapki.provenance import existing

    if (base is None) == (old is None):
        raise UsageError("give exactly one of --base REV (git) and --old PATH")
    existing("hiera", hiera, "hiera file or directory")
    refused_entries, before = keys_before(hiera, base, old)
    if refused_entries:
        for entry in refused_entries:
            print(entry.line())
        return EXIT_NEEDS_ACTION
    moves = advances(before, rotation_keys(hiera))
    if not moves:
        print("no cluster's CA rotation or live switch advances")
        return EXIT_OK
    # The rule refuses some moves outright, from hiera alone: no PuppetDB needed.
    refused = 0
    for move in moves:
        if not move.move.allowed:
            refused += 1
            print(f"cluster {shown(move.cluster)}: {move.what}: refused: {move.move.why}")
        elif move.gate is None:
            print(f"cluster {shown(move.cluster)}: {move.what}: allowed, no gate "
                  f"({move.move.kind}: {move.move.why})")  # fmt: skip
    gated = [m for m in moves if m.move.allowed and m.gate is not None]
    if no_puppetdb or not gated:
        for move in gated:
            print(
                f"typhapki: warning: cluster {shown(move.cluster)}: {move.what} "
                f"({move.stage}); not checked against PuppetDB (--no-puppetdb): the merge "
                f"check must confirm {unchecked(move)}",
                file=sys.stderr,
            )
        return EXIT_NEEDS_ACTION if refused else EXIT_OK
    kube = kube or KubeOptions()
    switching = sorted({m.cluster for m in gated if m.gate in SWITCH_GATES})
    access = {c: gate_kube_access(kube, c, len(switching)) for c in switching}  # usage first
    db = puppetdb_client(opts)  # one client: one deadline for every cluster's queries
    for move in gated:
        # The live switch and the emergency judge what runs now: a stale fact holds them.
        current = move.cluster in access or move.gate in EMERGENCY_GATES
        age = max_age("2h") if current else timedelta(days=36500)
        _, nodes = judged_nodes(db, move.cluster, age, datetime.now(UTC))
        if move.gate in SWITCH_GATES:
            api = kube_api(access[move.cluster], kube)  # each cluster's own deadline
            verdict = switch_verdict(move.stage, nodes, api, kube.namespace, None)
            said = f"the {move.stage} gate passes for all {verdict.members} members"
            held = f"{len(verdict.holding_back)} members or objects hold the {move.stage} gate"
        else:
            if (
                move.gate in EMERGENCY_GATES
                and (mapped := emergency.planned_maps_to(nodes)) is not None
            ):
                print(f"cluster {shown(move.cluster)}: {mapped}")
            verdict, said, held = gate_verdict(move, nodes)
        if verdict.ready:
            print(f"cluster {shown(move.cluster)}: {move.what}: {said}")
            continue
        refused += 1
        if not verdict.members:
            held += " (no members)"
        print(f"cluster {shown(move.cluster)}: {move.what} ({move.stage}) refused: {held}")
        for certname, why in verdict.holding_back[:50]:
            print(f"  {shown(certname)}: {why}")
    return EXIT_NEEDS_ACTION if refused else EXIT_OK


def run(request: CommandRequest) -> int:
    """`fleet gate`: PuppetDB's access is the table's `puppetdb` group, the Kubernetes
    API's its `FLEET_KUBE` options."""
    r = request
    db, kube = PuppetDBOptions(**r.group("puppetdb")), KubeOptions.of(r.values)
    return fleet_gate(db, r.hiera, r.base, r.old, r.no_puppetdb, kube)
