"""The live switch to mTLS in stages (docs/kubernetes.md §4): the objects each stage adds,
changes and removes in a stream of Calico's objects.

Calico has no mixed mode: Typha listens with TLS as soon as one of its TLS variables is
set, and Felix dials TLS as soon as one of its own is. So the switch runs a second,
TLS Typha beside the plain one and moves each node as its calico-node pod rolls:

- ``parallel``: a Deployment ``calico-typha-tls`` derived from the plain one in the same
  input (image, resources, tolerations, env, ServiceAccount), with the wiring's TLS, its
  own ports (server, health, metrics: both Typhas run on the host network of the same
  labelled nodes), its own pod labels, Service and PodDisruptionBudget. calico-node and
  the plain Typha are left as they are;
- ``switch``: calico-node gets the TLS env and ``FELIX_TYPHAK8SSERVICENAME`` naming the
  TLS Service, as a literal: never through the ``calico-config`` ConfigMap, which
  old-spec containers read again on every restart (a rollback must find the plain
  Typha where it was);
- ``retire``: the plain Deployment, its Service and its budget leave the output.

Every stage is derived from the chart's own plain Deployment, so a chart upgrade moves
both Typhas. The result is checked by typhapki/kubernetes/tlspair.py `check_stages`.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from typhapki.errors import ConfigError
from typhapki.kubernetes.manifests import NODE_WORKLOAD, TYPHA_WORKLOAD, WiringPatch
from typhapki.record import record
from typhapki.settings.wiring import Stage, TlsPolicy

TLS_NAME = "calico-typha-tls"
TLS_WORKLOAD = ("apps/v1", "Deployment", TLS_NAME)
# The TLS pods' selector label: the key Calico's selectors use, another value, so that
# `k8s-app: calico-typha` selects none of them.
TLS_LABELS = {"k8s-app": TLS_NAME}
PORT_NAME = "calico-typha"  # hard-coded in Calico's typha/pkg/discovery/discovery.go
TLS_FILE = "typha-tls.yaml"  # the TLS Typha's objects, in --kustomize-dir / --wiring-dir


@record(frozen=True)
class Ports:
    """A Typha's server, health and metrics ports (TYPHA_SERVERPORT, TYPHA_HEALTHPORT,
    TYPHA_PROMETHEUSMETRICSPORT)."""

    server: int
    health: int
    metrics: int

    def values(self) -> tuple[int, int, int]:
        return (self.server, self.health, self.metrics)


DEFAULT_PORTS = Ports(5473, 9098, 9093)  # Calico's defaults (0 means 5473)
# The TLS Typha's: clear of the plain Typha's defaults and of Felix's own health (9099)
# and metrics (9091) ports on the same host network.
TLS_PORTS = Ports(5474, 9097, 9095)
_PORT_ENV = {"server": "TYPHA_SERVERPORT", "health": "TYPHA_HEALTHPORT",
             "metrics": "TYPHA_PROMETHEUSMETRICSPORT"}  # fmt: skip
# Names the TLS Typha sets itself, dropped from what it inherits (any case).
_OWN_ENV = {*_PORT_ENV.values(), "TYPHA_K8SSERVICENAME", "TYPHA_K8SPORTNAME",
            "TLS_MIN_VERSION", "TLS_CIPHER_SUITES"}  # fmt: skip
_PROBES = ("livenessProbe", "readinessProbe", "startupProbe")


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}


def seq(value: Any, what: str) -> list[Any]:
    """A list field as a list (absent: empty); ConfigError for anything else."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(f"{what}: expected a list")
    return value


def container_of(obj: dict[Any, Any], name: str, what: str) -> dict[Any, Any]:
    pod = _mapping(_mapping(_mapping(obj.get("spec")).get("template")).get("spec"))
    containers = pod.get("containers")
    found = [c for c in containers if isinstance(c, dict) and c.get("name") == name] if (
        isinstance(containers, list)) else []  # fmt: skip
    if len(found) != 1:
        raise ConfigError(f"{what}: {len(found)} containers named {name}, expected one")
    return found[0]


def env_entry(container: dict[Any, Any], name: str, what: str) -> dict[Any, Any] | None:
    """The env entry of `name` (Calico reads names in any case); ConfigError for two."""
    env = container.get("env") or []
    if not isinstance(env, list):
        raise ConfigError(f"{what}: env: expected a list")
    hits = [e for e in env if isinstance(e, dict) and str(e.get("name", "")).upper() == name]
    if len(hits) > 1:
        raise ConfigError(f"{what}: env {name} is set {len(hits)} times; keep one")
    return hits[0] if hits else None


def plain_value(container: dict[Any, Any], name: str, what: str) -> str | None:
    entry = env_entry(container, name, what)
    if entry is None:
        return None
    value = entry.get("value")
    if "valueFrom" in entry or not isinstance(value, str):
        raise ConfigError(f"{what}: env {name}: not a plain value, a shape typhapki cannot follow")
    return value


def typha_ports(container: dict[Any, Any], what: str) -> Ports:
    """The ports a Typha container listens on, from its env and Calico's defaults."""
    found = {}
    for field, name in _PORT_ENV.items():
        text = plain_value(container, name, what)
        default = getattr(DEFAULT_PORTS, field)
        if text is None:
            found[field] = default
            continue
        if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
            raise ConfigError(f"{what}: env {name}: {text!r} is not a port")
        found[field] = int(text) or (default if field == "server" else 0)
    return Ports(**found)


def _int_port(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def _selector_keys(selector: Any) -> set[str]:
    keys = set(_mapping(_mapping(selector).get("matchLabels")))
    for requirement in seq(_mapping(selector).get("matchExpressions"), "matchExpressions"):
        keys.add(str(_mapping(requirement).get("key")))
    return keys


def _identify(doc: Any) -> tuple[tuple[str, str, str], str | None]:
    from typhapki.kubernetes.kustomize import _identify as identify

    return identify(doc)


def is_service(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == "Service" and doc.get("apiVersion") == "v1"


def tls_pod_labels(plain: dict[Any, Any], documents: Sequence[Any], where: str) -> dict[str, str]:
    """The plain pods' labels without any key a plain selector uses, plus TLS_LABELS."""
    from typhapki.kubernetes.budget import pod_labels

    labels = pod_labels(plain, where)
    used = _selector_keys(_mapping(plain.get("spec")).get("selector"))
    for doc in documents:
        if is_service(doc):
            selector = _mapping(doc.get("spec")).get("selector")
            if isinstance(selector, dict) and selector.items() <= labels.items():
                used |= set(selector)
        elif isinstance(doc, dict) and doc.get("kind") == "PodDisruptionBudget":
            used |= _selector_keys(_mapping(doc.get("spec")).get("selector"))
    return {**{k: v for k, v in labels.items() if k not in used}, **TLS_LABELS}


def tls_deployment(
    plain: dict[Any, Any],
    typha_patch: WiringPatch,
    documents: Sequence[Any],
    where: str,
) -> dict[str, Any]:
    """The TLS Typha's Deployment, derived from the plain one (`plain`, as the chart
    renders it or as the cluster runs it)."""
    from typhapki.kubernetes.kustomize import strategic_merge

    what = f"{where}: Deployment calico-typha"
    doc = copy.deepcopy(plain)
    doc.pop("status", None)
    meta = _mapping(plain.get("metadata"))
    new_meta: dict[str, Any] = {"name": TLS_NAME}
    if meta.get("namespace"):
        new_meta["namespace"] = meta["namespace"]
    new_meta["labels"] = dict(TLS_LABELS)
    doc["metadata"] = new_meta
    spec = _mapping(doc.get("spec"))
    labels = tls_pod_labels(plain, documents, where)
    spec["selector"] = {"matchLabels": dict(TLS_LABELS)}
    template = _mapping(spec.get("template"))
    template_meta = _mapping(template.get("metadata"))
    template_meta.pop("creationTimestamp", None)
    template_meta["labels"] = labels
    template["metadata"] = template_meta
    container = container_of(doc, "calico-typha", what)
    ports = typha_ports(container, what)
    clash = set(ports.values()) & set(TLS_PORTS.values())
    if clash:
        raise ConfigError(
            f"{what}: uses port {min(clash)}, which the TLS Typha needs (server "
            f"{TLS_PORTS.server}, health {TLS_PORTS.health}, metrics {TLS_PORTS.metrics})"
        )
    env = [
        e for e in container.get("env") or []
        if not (isinstance(e, dict) and str(e.get("name", "")).upper() in _OWN_ENV)
    ]  # fmt: skip
    env += [
        {"name": "TYPHA_SERVERPORT", "value": str(TLS_PORTS.server)},
        {"name": "TYPHA_HEALTHPORT", "value": str(TLS_PORTS.health)},
        {"name": "TYPHA_PROMETHEUSMETRICSPORT", "value": str(TLS_PORTS.metrics)},
        {"name": "TYPHA_K8SSERVICENAME", "value": TLS_NAME},
    ]
    container["env"] = env
    moved = dict(zip(ports.values(), TLS_PORTS.values(), strict=True))
    named = 0
    for port in seq(container.get("ports"), f"{what}: ports"):
        port = _mapping(port)
        for field in ("containerPort", "hostPort"):
            if _int_port(port.get(field)) in moved:
                port[field] = moved[_int_port(port[field])]  # type: ignore[index]
        if port.get("name") == PORT_NAME:
            named += 1
            if port.get("containerPort") != TLS_PORTS.server:
                raise ConfigError(
                    f"{what}: its port named {PORT_NAME} is {port.get('containerPort')}, not "
                    f"its TYPHA_SERVERPORT {ports.server}"
                )
    if named != 1:
        raise ConfigError(
            f"{what}: {named} container ports named {PORT_NAME}, expected one (Felix "
            "finds Typha by that name)"
        )
    for probe_field in _PROBES:
        probe = container.get(probe_field)
        if probe is None:
            continue
        get = _mapping(_mapping(probe).get("httpGet"))
        if _int_port(get.get("port")) != ports.health:
            raise ConfigError(
                f"{what}: {probe_field} does not probe Typha's health port {ports.health} "
                "over HTTP: a shape typhapki cannot follow"
            )
        get["port"] = TLS_PORTS.health
    return strategic_merge(doc, typha_patch.patch)  # type: ignore[no-any-return]


def tls_service(namespace: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": TLS_NAME}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(TLS_LABELS)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta,
        "spec": {
            "ports": [
                {
                    "name": PORT_NAME,
                    "port": TLS_PORTS.server,
                    "protocol": "TCP",
                    "targetPort": PORT_NAME,
                }
            ],
            "selector": dict(TLS_LABELS),
        },
    }


def tls_budget(namespace: str | None) -> dict[str, Any]:
    from typhapki.kubernetes.manifests import typha_pdb

    budget = typha_pdb(namespace, {"matchLabels": dict(TLS_LABELS)})
    budget["metadata"]["name"] = TLS_NAME
    budget["metadata"]["labels"] = dict(TLS_LABELS)
    return budget


def node_patch(patch: WiringPatch, stage: Stage) -> WiringPatch | None:
    """calico-node's patch in `stage`: none in parallel, else the TLS env and the TLS
    Service's name as a literal (``valueFrom: null`` drops the chart's ConfigMap ref)."""
    if stage is Stage.PARALLEL:
        return None
    from typhapki.kubernetes.kustomize import strategic_merge

    env = [{"name": "FELIX_TYPHAK8SSERVICENAME", "value": TLS_NAME, "valueFrom": None}]
    extra = {"spec": {"template": {"spec": {"containers": [{"name": "calico-node",
                                                            "env": env}]}}}}  # fmt: skip
    return WiringPatch(
        patch.api_version, patch.kind, patch.name, patch.namespace,
        strategic_merge(patch.patch, extra), patch.file_name,
    )  # fmt: skip


def with_policy(patches: Sequence[WiringPatch], policy: TlsPolicy) -> list[WiringPatch]:
    """The patches with TLS_MIN_VERSION / TLS_CIPHER_SUITES on both containers."""
    from typhapki.kubernetes.kustomize import strategic_merge

    env = policy.env()
    if not env:
        return list(patches)
    out = []
    for p in patches:
        container = "calico-typha" if (p.api_version, p.kind, p.name) == TYPHA_WORKLOAD else (
            "calico-node")  # fmt: skip
        extra = {"spec": {"template": {"spec": {"containers": [{"name": container,
                                                                "env": env}]}}}}  # fmt: skip
        out.append(WiringPatch(p.api_version, p.kind, p.name, p.namespace,
                               strategic_merge(p.patch, extra), p.file_name))  # fmt: skip
    return out


@record(frozen=True)
class Staged:
    """What a stage does to a stream: objects added, replaced (by key) and removed."""

    added: list[dict[str, Any]]
    replaced: dict[tuple[str, str, str], dict[str, Any]]
    removed: list[int]  # indexes into the documents
    node: WiringPatch | None  # calico-node's patch, if the stage has one


def plain_objects(documents: Sequence[Any], typha: dict[Any, Any], where: str) -> list[int]:
    """Indexes of the plain Typha's Deployment, the Services selecting its pods, and the
    budgets covering them: what retire removes."""
    from typhapki.kubernetes.budget import covering, pod_labels

    labels = pod_labels(typha, where)
    budgets = set(covering(documents, typha, where))
    out = []
    for n, doc in enumerate(documents):
        if not isinstance(doc, dict):
            continue
        if _identify(doc)[0] == TYPHA_WORKLOAD:
            out.append(n)
        elif is_service(doc):
            selector = _mapping(doc.get("spec")).get("selector")
            if isinstance(selector, dict) and selector and selector.items() <= labels.items():
                out.append(n)
        elif doc.get("kind") == "PodDisruptionBudget":
            key, namespace = _identify(doc)
            if (f"{namespace}/{key[2]}" if namespace else key[2]) in budgets:
                out.append(n)
    return out


def stage_stream(
    documents: Sequence[Any],
    patches: Sequence[WiringPatch],
    stage: Stage,
    where: str,
) -> Staged:
    """What `stage` makes of `documents` (Calico's objects, as the chart renders them)."""
    from typhapki.kubernetes.budget import budget_selector, needs_budget
    from typhapki.kubernetes.kustomize import find_workloads, strategic_merge
    from typhapki.kubernetes.manifests import typha_pdb
    from typhapki.kubernetes.tlspair import check_input

    for doc in documents:
        if isinstance(doc, dict) and _identify(doc)[0][2] == TLS_NAME:
            raise ConfigError(
                f"{where}: already holds a {doc.get('kind')} {TLS_NAME}: typhapki adds it "
                "itself; take it out of the input"
            )
    workloads = find_workloads(documents, where)
    objects = {_identify(d)[0]: d for d in documents if isinstance(d, dict)}
    typha, node = objects[TYPHA_WORKLOAD], objects[NODE_WORKLOAD]
    check_input(documents, where)  # the plain pair agrees before anything moves
    namespace = workloads[TYPHA_WORKLOAD].namespace
    by_key = {(p.api_version, p.kind, p.name): p for p in patches}
    added = [
        tls_deployment(typha, by_key[TYPHA_WORKLOAD], documents, where),
        tls_service(namespace),
        tls_budget(namespace),
    ]
    removed: list[int] = []
    if stage is Stage.RETIRE:
        removed = plain_objects(documents, typha, where)
    elif needs_budget(documents, typha, where):  # restart-typha evicts the plain one too
        added.append(typha_pdb(namespace, budget_selector(typha, where)))
    patch = node_patch(by_key[NODE_WORKLOAD], stage)
    replaced = {} if patch is None else {NODE_WORKLOAD: strategic_merge(node, patch.patch)}
    return Staged(added, replaced, removed, patch)


def goldmane_warning(documents: Sequence[Any]) -> str | None:
    """The warning line when a FelixConfiguration points Felix at a Goldmane server."""
    for doc in documents:
        if not (isinstance(doc, dict) and doc.get("kind") == "FelixConfiguration"):
            continue
        server = _mapping(doc.get("spec")).get("flowLogsGoldmaneServer")
        if server:
            name = _mapping(doc.get("metadata")).get("name", "(no name)")
            return (
                f"typhapki: warning: FelixConfiguration {name} sets flowLogsGoldmaneServer: "
                "Felix presents its Typha client certificate to Goldmane too, so the Typha "
                "CA bundle must also validate Goldmane's server certificate "
                "(docs/kubernetes.md)"
            )
    return None


def wiring_dir_objects(
    documents: Sequence[Any], patches: Sequence[WiringPatch], stage: Stage, where: str
) -> tuple[list[dict[str, Any]], WiringPatch | None]:
    """The TLS Typha's Deployment, Service and budget, derived from the live calico-typha
    Deployment (the only object of `documents`), and calico-node's patch in `stage`."""
    from typhapki.kubernetes.tlspair import view

    found = [d for d in documents if isinstance(d, dict) and _identify(d)[0] == TYPHA_WORKLOAD]
    if len(found) != 1 or len(documents) != 1:
        raise ConfigError(
            f"{where}: expected the calico-typha Deployment (apps/v1) alone, as `kubectl get "
            "deployment calico-typha -o yaml` prints it"
        )
    [plain] = found
    by_key = {(p.api_version, p.kind, p.name): p for p in patches}
    deployment = tls_deployment(plain, by_key[TYPHA_WORKLOAD], [plain], where)
    meant = view(by_key[TYPHA_WORKLOAD].patch, TYPHA_WORKLOAD, "the wiring of calico-typha")
    if view(deployment, TLS_WORKLOAD, where, [], TYPHA_WORKLOAD) != meant:
        raise ConfigError(f"{where}: Deployment {TLS_NAME}: the TLS settings are not the wiring's")
    namespace = _identify(plain)[1]
    return [deployment, tls_service(namespace), tls_budget(namespace)], node_patch(
        by_key[NODE_WORKLOAD], stage
    )
