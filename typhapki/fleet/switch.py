"""The live switch's gates (docs/fleet.md, docs/kubernetes.md section 4): when a
cluster's `tls_stage` may move to `switch`, and to `retire`, judged from the members'
facts and what the Kubernetes API says (typhapki/kubernetes/rollout.py). Pure: no I/O.

switch, only when all of these hold:
- the TLS Typha Deployment is fully available (rollout.DeploymentStatus.problems);
- its Service has ready endpoints behind the port named `calico-typha`;
- every member's fact is fresh and shows a valid Felix set;
- every TLS Typha host (each endpoint's nodeName, a member) reports, in its fact, a
  TLS Typha on that endpoint's port whose mTLS probe, as this node's Felix, passed.

retire, only when both hold:
- the calico-node DaemonSet reports observedGeneration current and updated = ready =
  desired (rollout.DaemonSetStatus.problems);
- every member's fact was produced after the DaemonSet's last change and says its
  running Felix dials TLS (its process's environment).

A Kubernetes node is a member when its name is the member's certname, or the first
label of exactly one member's certname (Puppet certnames are usually FQDNs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

from typhapki.fleet.nodes import STALE, Node
from typhapki.fleet.summary import Readiness
from typhapki.kubernetes.rollout import DaemonSetStatus, DeploymentStatus, Endpoint
from typhapki.typhaports import PORT_NAME, TLS_NAME


def _iso(when: datetime | None) -> str:
    return "never" if when is None else when.strftime("%Y-%m-%dT%H:%M:%SZ")


def _fresh(node: Node) -> str:
    """Why the node's fact cannot be believed ("" when it can)."""
    if not node.judged or node.state == STALE:
        return node.state + (f": {node.reason}" if node.reason else "")
    return ""


def _member(host: str, nodes: Sequence[Node]) -> Node | None:
    exact = [n for n in nodes if n.certname == host]
    if exact:
        return exact[0]
    short = [n for n in nodes if n.certname.split(".", 1)[0] == host]
    return short[0] if len(short) == 1 else None


def switch_gate(
    nodes: Iterable[Node], deployment: DeploymentStatus, endpoints: Sequence[Endpoint]
) -> Readiness:
    """Whether the cluster may move to `switch` (module docstring)."""
    members = sorted(nodes, key=lambda n: n.certname)
    holding = [(f"deployment/{deployment.name}", why) for why in deployment.problems()]
    service = f"service/{TLS_NAME}"
    if any(e.port is None for e in endpoints):
        holding.append((service, f"an EndpointSlice without one port named {PORT_NAME}"))
    if not any(e.ready and e.port is not None for e in endpoints):
        holding.append((service, f"no ready endpoint behind the port named {PORT_NAME}"))
    for node in members:
        why = _fresh(node) or ("" if node.felix_set_ok else "no valid Felix set")
        if why:
            holding.append((node.certname, why))
    for endpoint in sorted(endpoints, key=lambda e: (e.node or "", e.port or 0)):
        if endpoint.node is None:
            holding.append((service, "an endpoint without a nodeName: its host is unknown"))
            continue
        member = _member(endpoint.node, members)
        if member is None:
            holding.append((endpoint.node, "runs a TLS Typha but is no member of the cluster"))
            continue
        if _fresh(member) or endpoint.port is None:
            continue  # already said
        probes = [t for t in member.tls_typhas if t[0] == endpoint.port]
        if not probes:
            why = f"its fact shows no TLS Typha on port {endpoint.port}"
        elif not probes[0][1]:
            why = f"the mTLS probe of port {endpoint.port} failed: {probes[0][2] or 'refused'}"
        else:
            continue
        holding.append((member.certname, why))
    return Readiness("switch", len(members), _unique(holding))


def retire_gate(
    nodes: Iterable[Node], daemonset: DaemonSetStatus, since: datetime | None = None
) -> Readiness:
    """Whether the cluster may move to `retire` (module docstring)."""
    members = sorted(nodes, key=lambda n: n.certname)
    holding = [(f"daemonset/{daemonset.name}", why) for why in daemonset.problems()]
    after = max((t for t in (daemonset.changed_at, since) if t is not None), default=None)
    for node in members:
        why = _fresh(node)
        if not why and after is not None and (node.produced_at is None or
                                             node.produced_at <= after):  # fmt: skip
            why = f"fact uploaded {_iso(node.produced_at)}, not after {_iso(after)}"
            if after == daemonset.changed_at:
                why += f" (the {daemonset.name} DaemonSet's last change)"
        if not why and node.felix_tls is not True:
            why = (
                "its running Felix dials plain Typha"
                if node.felix_tls is False
                else f"whether its Felix dials TLS is unknown: {node.felix_why}"
            )
        if why:
            holding.append((node.certname, why))
    return Readiness("retire", len(members), holding)


def _unique(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(dict.fromkeys(pairs))
