"""`typhapki fleet`: the fleet as PuppetDB knows it, one table row per cluster.

Wiring only: the access records and clients (typhapki/fleet/access.py), the queries
(typhapki/fleet/query.py), each node judged (typhapki/fleet/nodes.py) and summarised
(typhapki/fleet/summary.py); `fleet ready` and `fleet gate` are
typhapki/commands/fleet_ready.py and typhapki/commands/fleet_gate.py. Exit 0 healthy,
1 action needed, 8 PuppetDB failed (docs/exit-codes.md). Every text from PuppetDB or
hiera is printed through `shown` (typhapki/fleet/nodes.py).
"""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK
from typhapki.fleet.access import PuppetDBOptions, judged_nodes, puppetdb_client
from typhapki.fleet.access import max_age as max_age_of


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

    now, age = datetime.now(UTC), max_age_of(max_age)
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


def run(request: CommandRequest) -> int:
    """`fleet`: how it reaches PuppetDB is the table's `puppetdb` group."""
    r = request
    return fleet(PuppetDBOptions(**r.group("puppetdb")), r.cluster, r.json_out, r.max_age, r.hiera)
