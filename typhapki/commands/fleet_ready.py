"""`typhapki fleet ready`: whether every member of a cluster reached a stage of the CA
rotation, of the emergency roll, or may start the live switch's next (its gate from the
Kubernetes API: typhapki/fleet/access.py `switch_verdict`). Exit 0 ready, 1 held back
(each member or object that holds it named), 8 PuppetDB failed (docs/exit-codes.md).
"""

from __future__ import annotations

import re
import sys
from datetime import UTC, datetime
from pathlib import Path

from typhapki.commands import CommandRequest
from typhapki.errors import EXIT_NEEDS_ACTION, EXIT_OK, UsageError
from typhapki.fleet.access import (
    KubeOptions,
    PuppetDBOptions,
    judged_nodes,
    kube_access,
    kube_api,
    puppetdb_client,
    switch_verdict,
)
from typhapki.fleet.access import max_age as max_age_of


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
    now, age = datetime.now(UTC), max_age_of(max_age)
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


def run(request: CommandRequest) -> int:
    """`fleet ready`: PuppetDB's access is the table's `puppetdb` group, the Kubernetes
    API's its `FLEET_KUBE` options."""
    r = request
    db, kube = PuppetDBOptions(**r.group("puppetdb")), KubeOptions.of(r.values)
    return fleet_ready(db, r.cluster, r.stage, r.since, r.new_ca, r.old_ca, r.max_age, kube)
