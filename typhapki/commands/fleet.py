"""`typhapki fleet`, `fleet ready` and `fleet gate`: the fleet as PuppetDB knows it.

Wiring only: the access records and clients (typhapki/fleet/access.py), the queries
(typhapki/fleet/query.py), each node judged (typhapki/fleet/nodes.py) and summarised
(typhapki/fleet/summary.py), the hiera change before and after
(typhapki/fleet/hieradiff.py) and its gates (typhapki/fleet/gate.py); exit 0 healthy
or ready, 1 action needed (or, for the gate, a change it cannot judge), 8 PuppetDB
failed (docs/exit-codes.md). Every text from PuppetDB or hiera is printed through
`shown` (typhapki/fleet/nodes.py).
"""

from __future__ import annotations

import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, UsageError
from typhapki.fleet.access import (
    KubeOptions,
    PuppetDBOptions,
    gate_kube_access,
    judged_nodes,
    kube_access,
    kube_api,
    puppetdb_client,
    switch_verdict,
)


def _max_age(value: str) -> timedelta:
    """--max-age: 90m, 2h, 1d or seconds, as every duration option reads it."""
    from typhapki.pki.settings import parse_duration
    from typhapki.provenance import parsed

    return parsed("max_age", value, lambda what: parse_duration(value, what))


def fleet(
    opts: PuppetDBOptions,
    cluster: str | None,
    as_json: bool,
    max_age: str,
    hiera: Path | None = None,
) -> int:
    """The per-cluster table (or JSON); exit 0 when every cluster is healthy, else 1.
    With HIERA, each cluster's live switch stage beside its progress."""
    from typhapki.fleet.summary import render_table, summarise

    now, age = datetime.now(UTC), _max_age(max_age)
    stages = emergencies = None
    if hiera is not None:
        from typhapki.fleet.gate import rotation_keys
        from typhapki.provenance import existing

        existing("hiera", hiera, "hiera file or directory")
        keys = rotation_keys(hiera)
        stages = {name: k.tls_stage for name, k in keys.items()}
        emergencies = {name: (k.emergency, k.emergency_ca) for name, k in keys.items()}
    members, nodes = judged_nodes(puppetdb_client(opts), cluster, age, now)
    clusters = summarise(members, nodes, stages, emergencies)
    healthy = bool(clusters) and all(c.healthy for c in clusters)
    if as_json:
        print(json.dumps({"healthy": healthy, "clusters": [c.as_json() for c in clusters]}))
    elif clusters:
        print(render_table(clusters))
    if not clusters:
        which = f"cluster {cluster!r}" if cluster else "any cluster"
        print(f"no node's catalog holds Class[Typhapki] for {which}", file=sys.stderr)
    return EXIT_OK if healthy else EXIT_NEEDS_ACTION


def ca_fingerprint(value: str, name: str) -> str:
    """The option `name`'s CA, given as a SHA-256 fingerprint (hex, colons allowed) or a
    PEM file."""
    from typhapki.pki.pem import load_certs
    from typhapki.pki.verify import fingerprint
    from typhapki.provenance import OptionError

    compact = value.replace(":", "").lower()
    if re.fullmatch(r"[0-9a-f]{64}", compact):
        return compact
    path = Path(value)
    if not path.exists():
        raise OptionError(name, value[:80], "neither a SHA-256 fingerprint nor a file")
    certs = load_certs(path, "CA certificate")
    if len(certs) != 1:
        raise OptionError(name, value, f"expected one CA certificate, found {len(certs)}")
    return fingerprint(certs[0])


def fleet_ready(
    opts: PuppetDBOptions,
    cluster: str,
    stage: str,
    since: str | None,
    new_ca: str | None,
    old_ca: str | None,
    max_age: str,
    kube: KubeOptions | None = None,
) -> int:
    """Exit 0 when every member of CLUSTER reached STAGE by fingerprints (or, for the
    live switch's switch and retire, its gate passes), else 1 listing what holds it
    back."""
    from typhapki.fleet import emergency
    from typhapki.fleet.moves import SWITCH_GATES, gated_targets
    from typhapki.fleet.nodes import BrokenFact, parse_time, shown, stale_before
    from typhapki.fleet.summary import READY_STAGES, ready
    from typhapki.provenance import OptionError

    # The live switch's gated stages come from the stage-move rule (typhapki/fleet/moves.py).
    switching = gated_targets().get(stage) in SWITCH_GATES
    emergent = stage in emergency.READY_STAGES
    if stage not in READY_STAGES and not switching and not emergent:
        choices = (
            *READY_STAGES,
            *(t for t, g in gated_targets().items() if g in SWITCH_GATES),
            *(f"{s} (emergency)" for s in emergency.READY_STAGES),
        )
        raise OptionError("stage", stage[:40], f"expected {', '.join(choices)}")
    if emergent and emergency.needs_new_ca(stage) and new_ca is None:
        raise UsageError(f"--stage {stage} (emergency) needs --new-ca FILE|FINGERPRINT")
    if stage in ("trust-new", "reissue") and new_ca is None:
        raise UsageError(f"--stage {stage} needs --new-ca FILE|FINGERPRINT")
    if stage == "drop-old" and old_ca is None:
        raise UsageError("--stage drop-old needs --old-ca FILE|FINGERPRINT")
    new_fp = ca_fingerprint(new_ca, "new_ca") if new_ca else None
    old_fp = ca_fingerprint(old_ca, "old_ca") if old_ca else None
    try:
        since_at = parse_time(since, "since") if since is not None else None
    except BrokenFact as exc:
        raise OptionError("since", (since or "")[:40], str(exc).removeprefix("since: ")) from None
    now, age = datetime.now(UTC), _max_age(max_age)
    kube = kube or KubeOptions()
    access = kube_access(kube, kube.context, f"--stage {stage}") if switching else None
    # --since already bounds the facts that count; --max-age still names stale ones.
    _, nodes = judged_nodes(puppetdb_client(opts), cluster, age, now)
    if access is not None:
        api = kube_api(access, kube)
        verdict = switch_verdict(stage, nodes, api, kube.namespace, since_at)
    elif emergent:
        if since_at is not None:
            nodes = [stale_before(n, since_at) for n in nodes]
        verdict = emergency.ready(stage, nodes, new_fp)
    else:
        verdict = ready(stage, nodes, new_fp, old_fp, since_at)
    named = f"emergency {stage}" if emergent else stage
    if verdict.ready:
        said = (f"{stage} may start: its gate passes for all {verdict.members} members"
                if switching else f"all {verdict.members} members reached {named}")  # fmt: skip
        print(f"cluster {shown(cluster)}: {said}")
        return EXIT_OK
    if not verdict.members:
        print(f"cluster {shown(cluster)}: no members (no catalog holds Class[Typhapki] for it)")
    for certname, why in verdict.holding_back:
        print(f"{shown(certname)}: {why}")
    print(
        f"cluster {shown(cluster)}: {len(verdict.holding_back)} "
        f"{'members or objects' if switching else f'of {verdict.members} members'} "
        f"hold {named} back",
        file=sys.stderr,
    )
    return EXIT_NEEDS_ACTION


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
        age = _max_age("2h") if current else timedelta(days=36500)
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
