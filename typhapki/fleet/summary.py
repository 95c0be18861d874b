"""The fleet, summarised per cluster, and whether a CA rotation stage may advance.

Readiness is judged by CA fingerprints, never by stage numbers (stage 0 means both "not
started" and "finished"): `trust-new` is ready when every member's bundle holds the new
CA, `reissue` when every member's leaves are signed by it, `drop-old` when no member's
bundle holds the old CA. A member whose fact is missing, broken, or uploaded before
`since` holds the stage back, with the reason. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from typhapki.fleet.nodes import HEALTHY, STATES, Node, shown
from typhapki.fleet.readiness import Readiness as Readiness  # its home for the gates
from typhapki.record import field, record

READY_STAGES = ("trust-new", "reissue", "drop-old")
FIRST_EXPIRIES = 5  # how many of a cluster's earliest expiries the table shows


@record
class ClusterSummary:
    name: str
    nodes: list[Node] = field(default_factory=list)
    # The live switch's stage hiera says ("none" when it names none), None when no
    # hiera was given (`fleet --hiera`).
    tls_stage: str | None = None
    # The emergency CA roll hiera says (typha.emergency.step, None: none) and its new
    # CA's SHA-256; `hiera` False when no hiera was given.
    emergency: str | None = None
    emergency_ca: str | None = None
    hiera: bool = False

    def emergency_view(self) -> dict[str, Any] | None:
        """The emergency's step and, per member, what it still misses for the next
        step's gate (typhapki/fleet/emergency.py); with no emergency under way, the
        emergency step a planned rotation in progress equals. None: nothing to show."""
        from typhapki.fleet import emergency as roll
        from typhapki.pki.emergency import NUMBERS

        mapped = roll.planned_maps_to(self.nodes)
        if self.emergency is None:
            if mapped is None or not self.hiera:
                return None
            return {"step": None, "planned_maps_to": mapped}
        view: dict[str, Any] = {
            "step": self.emergency,
            "number": NUMBERS[self.emergency],
            "planned_maps_to": mapped,
            "next": None,
            "gate": None,
            "holding": [],
        }
        following = roll.next_gate(self.emergency)
        if following is not None:
            view["next"], view["gate"] = following
            verdict = roll.gate(following[1], self.nodes, self.emergency_ca)
            view["holding"] = [{"certname": c, "why": w} for c, w in verdict.holding_back]
        return view

    @property
    def counts(self) -> Counter[str]:
        return Counter(node.state for node in self.nodes)

    @property
    def healthy(self) -> bool:
        return bool(self.nodes) and all(node.state in HEALTHY for node in self.nodes)

    def first_expiries(self) -> list[Node]:
        dated = [n for n in self.nodes if n.first_expiry is not None and n.judged]
        return sorted(dated, key=lambda n: (n.first_expiry, n.certname))[:FIRST_EXPIRIES]

    def stages(self) -> Counter[str]:
        return Counter(n.stage or "unknown" for n in self.nodes if n.judged)

    def felix_transport(self) -> Counter[str]:
        """The switch's progress: members whose running Felix dials TLS, plain Typha,
        or unknown (not running, no evidence in the fact, the fact not believed)."""
        return Counter(
            "tls" if n.judged and n.felix_tls
            else "plain" if n.judged and n.felix_tls is False
            else "unknown"
            for n in self.nodes
        )  # fmt: skip

    def as_json(self) -> dict[str, Any]:
        felix = self.felix_transport()
        return {
            "cluster": self.name,
            "members": len(self.nodes),
            "healthy": self.healthy,
            "tls_switch": {
                "stage": self.tls_stage,
                "felix": {k: felix.get(k, 0) for k in ("tls", "plain", "unknown")},
            },
            "emergency": self.emergency_view(),
            "counts": {state: self.counts.get(state, 0) for state in STATES},
            "stages": dict(sorted(self.stages().items())),
            "first_expiries": [
                {"certname": n.certname, "not_after": _iso(n.first_expiry)}
                for n in self.first_expiries()
            ],
            "needs_action": [
                {"certname": n.certname, "state": n.state, "reason": n.reason}
                for n in sorted(self.nodes, key=lambda n: n.certname)
                if n.state not in HEALTHY
            ],
        }


def _iso(when: datetime | None) -> str | None:
    return None if when is None else when.strftime("%Y-%m-%dT%H:%M:%SZ")


def summarise(
    members: Mapping[str, str],
    nodes: Iterable[Node],
    tls_stages: Mapping[str, str | None] | None = None,
    emergencies: Mapping[str, tuple[str | None, str | None]] | None = None,
) -> list[ClusterSummary]:
    """Clusters in name order; `members` maps certname -> cluster (from the catalogs),
    `tls_stages` cluster -> the live switch's stage in hiera, `emergencies` cluster ->
    the emergency's step and new CA in hiera (both when hiera was given)."""
    clusters: dict[str, ClusterSummary] = {}
    for node in nodes:
        cluster = members[node.certname]
        stage = None if tls_stages is None else (tls_stages.get(cluster) or "none")
        step, new_ca = (emergencies or {}).get(cluster, (None, None))
        summary = clusters.setdefault(
            cluster, ClusterSummary(cluster, [], stage, step, new_ca, emergencies is not None)
        )
        summary.nodes.append(node)
    return [clusters[name] for name in sorted(clusters)]


def render_table(clusters: list[ClusterSummary]) -> str:
    """The human table: one block per cluster."""
    lines: list[str] = []
    for c in clusters:
        counts = c.counts
        verdict = "healthy" if c.healthy else "NEEDS ACTION"
        lines.append(f"cluster {shown(c.name)}: {len(c.nodes)} members, {verdict}")
        for state in STATES:
            if counts.get(state):
                lines.append(f"  {state:<18} {counts[state]:>6}")
        stages = ", ".join(f"{s} {n}" for s, n in sorted(c.stages().items()))
        if stages:
            lines.append(f"  rotation stages: {stages}")
        felix = c.felix_transport()
        if c.tls_stage not in (None, "none") or felix.get("tls"):
            said = f"stage {c.tls_stage} (hiera)" if c.tls_stage else "stage unknown (no --hiera)"
            lines.append(
                f"  TLS switch: {said}, Felix on TLS "
                f"{felix.get('tls', 0)} of {len(c.nodes)} (plain {felix.get('plain', 0)}, "
                f"unknown {felix.get('unknown', 0)})"
            )
        lines.extend(_emergency_lines(c))
        for n in c.first_expiries():
            lines.append(f"  first expiry: {_iso(n.first_expiry)} {shown(n.certname)}")
        shown_nodes = [
            n for n in sorted(c.nodes, key=lambda n: n.certname) if n.state not in HEALTHY
        ]
        for n in shown_nodes[:20]:
            reason = f" ({n.reason})" if n.reason else ""  # escaped where it is made
            lines.append(f"  needs action: {shown(n.certname)}: {n.state}{reason}")
        if len(shown_nodes) > 20:
            lines.append(f"  ... and {len(shown_nodes) - 20} more (--json lists them all)")
    return "\n".join(lines)


def _emergency_lines(c: ClusterSummary) -> list[str]:
    view = c.emergency_view()
    if view is None:
        return []
    if view["step"] is None:
        return [f"  emergency: none ({view['planned_maps_to']})"]
    head = f"  emergency: step {view['step']} ({view['number']})"
    if view["next"] is None:
        head += "; over: removing typha.emergency lets typha.mode rule the firewall again"
    else:
        held = len(view["holding"])
        head += (
            f"; next: {view['next']} behind {view['gate']}: "
            f"{held} of {len(c.nodes)} members miss it"
        )
    lines = [head]
    if view["planned_maps_to"]:
        lines.append(f"  emergency: {view['planned_maps_to']}")
    for entry in view["holding"][:20]:
        lines.append(f"  emergency holds: {shown(entry['certname'])}: {entry['why']}")
    if len(view["holding"]) > 20:
        lines.append(f"  ... and {len(view['holding']) - 20} more (--json lists them all)")
    return lines


def ready(
    stage: str,
    nodes: Iterable[Node],
    new_ca: str | None,
    old_ca: str | None,
    since: datetime | None,
) -> Readiness:
    """Whether every member reached STAGE, by fingerprints (module docstring)."""
    holding: list[tuple[str, str]] = []
    count = 0
    for node in sorted(nodes, key=lambda n: n.certname):
        count += 1
        why = _holds_back(stage, node, new_ca, old_ca, since)
        if why:
            holding.append((node.certname, why))
    return Readiness(stage, count, holding)


def _holds_back(
    stage: str, node: Node, new_ca: str | None, old_ca: str | None, since: datetime | None
) -> str:
    if not node.judged:
        return node.state + (f": {node.reason}" if node.reason else "")
    if since is not None and (node.produced_at is None or node.produced_at < since):
        return f"fact uploaded {_iso(node.produced_at)}, before {_iso(since)}"
    if stage == "trust-new":
        return "" if new_ca in node.bundle else "bundle lacks the new CA"
    if stage == "reissue":
        if not node.leaf_issuers:
            return "no leaf"
        return "" if node.leaf_issuers == {new_ca} else "a leaf is not signed by the new CA"
    if stage == "drop-old":
        if not node.bundle:
            return "no bundle"
        return "bundle still holds the old CA" if old_ca in node.bundle else ""
    raise ValueError(stage)


# The stages a node's fact may name that count as having reached a stage (stage names
# only: the gate knows no fingerprints; `fleet ready` judges by them instead).
_REACHED = {"none": {"none"}, "trust-new": {"trust-new", "reissue"}, "reissue": {"reissue"}}


def reached(stage: str, nodes: Iterable[Node]) -> Readiness:
    """Whether every member's fact shows STAGE (or later, inside the rotation)."""
    holding: list[tuple[str, str]] = []
    count = 0
    for node in sorted(nodes, key=lambda n: n.certname):
        count += 1
        if not node.judged:
            holding.append((node.certname, node.state))
        elif node.stage not in _REACHED[stage]:
            holding.append((node.certname, f"at stage {node.stage or 'unknown'}"))
    return Readiness(stage, count, holding)
