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
both Typhas. The result is checked by typhapki/kubernetes/tlspair.py `check_stages`;
the ports and names both read are in typhapki/typhaports.py. Here too are
the post-renderer and the kustomization of a stage, over typhapki/kubernetes/postrender.py
and typhapki/kubernetes/kustomize.py.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from typhapki.errors import ConfigError
from typhapki.kubernetes.kustomize import (
    KUSTOMIZATION,
    base_documents,
    check_base_path,
    check_containers,
    check_dirs,
    find_workloads,
    identify,
    strategic_merge,
)
from typhapki.kubernetes.manifests import (
    NODE_WORKLOAD,
    TYPHA_WORKLOAD,
    WiringPatch,
    namespace_problem,
)
from typhapki.kubernetes.postrender import REREAD, reassemble
from typhapki.kubernetes.tlspair import check_input, check_stages, felix_namespace, shown, view
from typhapki.kubernetes.tlsvalues import check_tls_values
from typhapki.record import record, replace
from typhapki.settings.wiring import Stage, TlsPolicy
from typhapki.typhaports import (
    OWN_ENV,
    PORT_NAME,
    PROBES,
    TLS_FILE,
    TLS_LABELS,
    TLS_NAME,
    TLS_PORTS,
    TLS_WORKLOAD,
    container_of,
    int_port,
    selector_keys,
    seq,
    typha_ports,
)
from typhapki.typhaports import mapping as _mapping


def is_service(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("kind") == "Service" and doc.get("apiVersion") == "v1"


def tls_pod_labels(plain: dict[Any, Any], documents: Sequence[Any], where: str) -> dict[str, str]:
    """The plain pods' labels without any key a plain selector uses, plus TLS_LABELS."""
    from typhapki.kubernetes.budget import pod_labels

    labels = pod_labels(plain, where)
    used = selector_keys(_mapping(plain.get("spec")).get("selector"))
    for doc in documents:
        if is_service(doc):
            selector = _mapping(doc.get("spec")).get("selector")
            if isinstance(selector, dict) and selector.items() <= labels.items():
                used |= set(selector)
        elif isinstance(doc, dict) and doc.get("kind") == "PodDisruptionBudget":
            used |= selector_keys(_mapping(doc.get("spec")).get("selector"))
    return {**{k: v for k, v in labels.items() if k not in used}, **TLS_LABELS}


def tls_deployment(
    plain: dict[Any, Any],
    typha_patch: WiringPatch,
    documents: Sequence[Any],
    where: str,
    service_namespace: str | None = None,
) -> dict[str, Any]:
    """The TLS Typha's Deployment, derived from the plain one (`plain`, as the chart
    renders it or as the cluster runs it). `service_namespace`: where its Service
    lands when `plain` names no namespace (where Felix looks for it)."""
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
    # Typha counts its peers through its own Service in TYPHA_K8SNAMESPACE (default
    # kube-system): the TLS one's is where its Deployment goes, or, when the input
    # names none, where Felix must find its Service.
    namespace = meta.get("namespace") or service_namespace
    own = OWN_ENV | ({"TYPHA_K8SNAMESPACE"} if namespace else set())
    env = [
        e for e in container.get("env") or []
        if not (isinstance(e, dict) and str(e.get("name", "")).upper() in own)
    ]  # fmt: skip
    env += [
        {"name": "TYPHA_SERVERPORT", "value": str(TLS_PORTS.server)},
        {"name": "TYPHA_HEALTHPORT", "value": str(TLS_PORTS.health)},
        {"name": "TYPHA_PROMETHEUSMETRICSPORT", "value": str(TLS_PORTS.metrics)},
        {"name": "TYPHA_K8SSERVICENAME", "value": TLS_NAME},
        *([{"name": "TYPHA_K8SNAMESPACE", "value": str(namespace)}] if namespace else []),
    ]
    container["env"] = env
    moved = dict(zip(ports.values(), TLS_PORTS.values(), strict=True))
    _check_sidecar_ports(doc, what)
    named = 0
    kept = []
    for port in seq(container.get("ports"), f"{what}: ports"):
        port = _mapping(port)
        number = int_port(port.get("containerPort"))
        if number not in moved:
            continue  # not a port Typha listens on (its env says which): not copied
        host = port.get("hostPort")
        if host is not None and int_port(host) != number:
            raise ConfigError(
                f"{what}: its port {number} is published on host port {shown(host)}, which "
                "the TLS Typha's pod on the same node could not also take"
            )
        port["containerPort"] = moved[number]
        if host is not None:
            port["hostPort"] = moved[number]
        kept.append(port)
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
    container["ports"] = kept
    for probe_field in PROBES:
        probe = container.get(probe_field)
        if probe is None:
            continue
        get = _mapping(_mapping(probe).get("httpGet"))
        if int_port(get.get("port")) != ports.health:
            raise ConfigError(
                f"{what}: {probe_field} does not probe Typha's health port {ports.health} "
                "over HTTP: a shape typhapki cannot follow"
            )
        get["port"] = TLS_PORTS.health
    return strategic_merge(doc, typha_patch.patch)  # type: ignore[no-any-return]


def _check_sidecar_ports(doc: dict[str, Any], what: str) -> None:
    """Refuse a port another container of the Typha pod holds on the node: the TLS pod,
    a copy on the same nodes, would clash with it (every port on the host network, a
    hostPort otherwise). Only Typha's own ports are moved (typhaports.py)."""
    pod = _mapping(_mapping(_mapping(doc.get("spec")).get("template")).get("spec"))
    host_network = pod.get("hostNetwork") is True
    running = [
        *seq(pod.get("containers"), f"{what}: containers"),
        *(c for c in seq(pod.get("initContainers"), f"{what}: initContainers")
          if _mapping(c).get("restartPolicy") == "Always"),  # a native sidecar
    ]  # fmt: skip
    for container in running:
        name = _mapping(container).get("name")
        if name == "calico-typha":
            continue
        for port in seq(_mapping(container).get("ports"), f"{what}: container ports"):
            port = _mapping(port)
            held = port.get("hostPort") or (port.get("containerPort") if host_network else None)
            if held is not None:
                raise ConfigError(
                    f"{what}: container {shown(name)} holds port {shown(held)} on the node: "
                    "the TLS Typha's pod would clash with it there; take the port out of "
                    "the Typha pod"
                )


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
    env = [{"name": "FELIX_TYPHAK8SSERVICENAME", "value": TLS_NAME, "valueFrom": None}]
    extra = {"spec": {"template": {"spec": {"containers": [{"name": "calico-node",
                                                            "env": env}]}}}}  # fmt: skip
    return WiringPatch(
        patch.api_version, patch.kind, patch.name, patch.namespace,
        strategic_merge(patch.patch, extra), patch.file_name,
    )  # fmt: skip


def with_policy(patches: Sequence[WiringPatch], policy: TlsPolicy) -> list[WiringPatch]:
    """The patches with TLS_MIN_VERSION / TLS_CIPHER_SUITES on both containers, as
    literals: ``valueFrom: null`` drops a chart's ConfigMap or Secret reference, since
    the API refuses an env entry with both (typhapki/kubernetes/tlsvalues.py)."""
    env = [{**e, "valueFrom": None} for e in policy.env()]
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


_V1_BUDGET = ("policy/v1", "PodDisruptionBudget")


@record(frozen=True)
class Staged:
    """What a stage does to a stream: objects added, replaced (by key) and removed."""

    added: list[dict[str, Any]]
    replaced: dict[tuple[str, str, str], dict[str, Any]]
    removed: list[int]  # indexes into the documents
    node: WiringPatch | None  # calico-node's patch, if the stage has one


def plain_objects(documents: Sequence[Any], typha: dict[Any, Any], where: str) -> list[int]:
    """Indexes of the plain Typha's Deployment, and of the Services and budgets that
    select its pods and no other pod of the stream: what retire removes. A Service or
    budget that also selects other pods (calico-node's, a namespace-wide budget) serves
    them too and stays (docs/kubernetes.md)."""
    from typhapki.kubernetes.budget import covering, pod_labels, selects
    from typhapki.kubernetes.tlspair import pod_bearers, pods_labels, same_namespace

    labels = pod_labels(typha, where)
    budgets = set(covering(documents, typha, where))
    others = [d for d in pod_bearers(documents) if identify(d)[0] != TYPHA_WORKLOAD]
    out = []
    for n, doc in enumerate(documents):
        if not isinstance(doc, dict):
            continue
        if identify(doc)[0] == TYPHA_WORKLOAD:
            out.append(n)
        elif is_service(doc):
            selector = _mapping(doc.get("spec")).get("selector")
            if not (isinstance(selector, dict) and selector):
                continue
            if selector.items() <= labels.items() and not any(
                same_namespace(o, doc) and selector.items() <= pods_labels(o).items()
                for o in others
            ):
                out.append(n)
        elif doc.get("kind") == "PodDisruptionBudget":
            key, namespace = identify(doc)
            if (f"{namespace}/{key[2]}" if namespace else key[2]) not in budgets:
                continue
            selector = _mapping(doc.get("spec")).get("selector")
            what = f"{where}: PodDisruptionBudget {key[2]}: spec.selector"
            v1 = doc.get("apiVersion") == "policy/v1"
            if not any(
                same_namespace(o, doc)
                and selects(selector, {str(k): str(v) for k, v in pods_labels(o).items()}, what, v1)
                for o in others
            ):
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
    from typhapki.kubernetes.manifests import typha_pdb

    for doc in documents:
        if isinstance(doc, dict) and identify(doc)[0][2] == TLS_NAME:
            raise ConfigError(
                f"{where}: already holds a {doc.get('kind')} {TLS_NAME}: typhapki adds it "
                "itself; take it out of the input"
            )
    workloads = find_workloads(documents, where)
    objects = {identify(d)[0]: d for d in documents if isinstance(d, dict)}
    typha, node = objects[TYPHA_WORKLOAD], objects[NODE_WORKLOAD]
    check_input(documents, where)  # the plain pair agrees before anything moves
    namespace = workloads[TYPHA_WORKLOAD].namespace
    by_key = {(p.api_version, p.kind, p.name): p for p in patches}
    added = [
        tls_deployment(
            typha, by_key[TYPHA_WORKLOAD], documents, where, felix_namespace(node, documents, where)
        ),
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
            name = shown(_mapping(doc.get("metadata")).get("name", "(no name)"))
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
    found = [d for d in documents if isinstance(d, dict) and identify(d)[0] == TYPHA_WORKLOAD]
    if len(found) != 1 or len(documents) != 1:
        raise ConfigError(
            f"{where}: expected the calico-typha Deployment (apps/v1) alone, as `kubectl get "
            "deployment calico-typha -o yaml` prints it"
        )
    [plain] = found
    by_key = {(p.api_version, p.kind, p.name): p for p in patches}
    # One namespace for the TLS Typha and calico-node's patch: the live Deployment's,
    # which --namespace (default kube-system, where the patch goes) must name.
    namespace = by_key[NODE_WORKLOAD].namespace
    theirs = identify(plain)[1]
    if theirs is not None and (problem := namespace_problem(theirs)) is not None:
        # It would be printed into the command that deletes the plain Typha at retire.
        raise ConfigError(f"{where}: metadata.namespace {shown(theirs)}: {problem}")
    if theirs is not None and theirs != namespace:
        raise ConfigError(
            f"{where}: Deployment calico-typha is in namespace {shown(theirs)}, but "
            f"calico-node's patch would go to {shown(namespace)} (--namespace, default "
            f"kube-system): give --namespace {shown(theirs)}"
        )
    plain = copy.deepcopy(plain)
    plain.setdefault("metadata", {})["namespace"] = namespace
    deployment = tls_deployment(plain, by_key[TYPHA_WORKLOAD], [plain], where)
    meant = view(by_key[TYPHA_WORKLOAD].patch, TYPHA_WORKLOAD, "the wiring of calico-typha")
    if view(deployment, TLS_WORKLOAD, where, [], TYPHA_WORKLOAD) != meant:
        raise ConfigError(f"{where}: Deployment {TLS_NAME}: the TLS settings are not the wiring's")
    check_tls_values([plain, deployment], [plain], where)
    return [deployment, tls_service(namespace), tls_budget(namespace)], node_patch(
        by_key[NODE_WORKLOAD], stage
    )


# --- the post-renderer and the kustomization in a stage ---------------------------------


def post_render_staged(
    text: str, patches: Sequence[WiringPatch], stage: Stage, where: str = "stdin"
) -> str:
    """The rendered stream in `stage`: the TLS Typha's Deployment, Service and budget
    appended, calico-node patched (switch, retire), the plain Typha's objects dropped
    (retire); every other document byte for byte. Read back and checked before it is
    returned (typhapki/kubernetes/tlspair.py `check_stages`)."""
    from typhapki.kubernetes.yamlstream import load

    parsed = load(text, where, "rendered manifests")
    documents = [d.obj for d in parsed if d.obj is not None]
    check_containers(documents, where)
    staged = stage_stream(documents, patches, stage, where)
    dropped = frozenset(id(documents[n]) for n in staged.removed)
    why = f"the live switch to mTLS, stage {stage}"
    result, objects = reassemble(
        parsed, staged.replaced, [(why, obj) for obj in staged.added], dropped
    )
    again = REREAD
    check_stages(objects, patches, stage, again)
    check_tls_values(objects, objects, where)
    return result


def staged_kustomization_files(
    kustomize_dir: Path, base: str, patches: Sequence[WiringPatch], stage: Stage
) -> tuple[dict[str, str], list[Any]]:
    """kustomization.yaml over the base in `stage`: the TLS Typha's objects as a resource
    of their own (derived from the base's plain Deployment: run again after a chart
    upgrade), calico-node's patch (switch, retire), and ``$patch: delete`` patches for
    the plain Typha's objects (retire). Returns the files and the base's documents."""
    from typhapki.kubernetes.manifests import dump_yaml

    relative = check_base_path(base)
    target = kustomize_dir / relative
    check_dirs(kustomize_dir, base, relative, target)
    documents = list(base_documents(target))
    check_containers(documents, str(target))
    staged = stage_stream(documents, patches, stage, str(target))
    # kustomize 2.0.3 (Debian's kubectl 1.20) does not know policy/v1: it merges a
    # `$patch: delete` into such a budget instead of deleting it. The plain budget then
    # stays, over pods that no longer exist (docs/kubernetes.md), with every kubectl alike.
    kept = [n for n in staged.removed if identify(documents[n])[0][:2] == _V1_BUDGET]
    staged = replace(staged, removed=[n for n in staged.removed if n not in kept])
    # What kustomize will build, as typhapki sees it: checked before anything is written.
    dropped = {id(documents[n]) for n in staged.removed}
    result = [
        staged.replaced.get(identify(d)[0], d) if isinstance(d, dict) else d
        for d in documents
        if id(d) not in dropped
    ] + staged.added
    check_stages(result, patches, stage, str(target))
    check_tls_values(result, result, str(target))
    spec: dict[str, Any] = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
    }
    if target.is_file():
        spec["resources"] = [str(relative), TLS_FILE]
    else:
        spec["bases"] = [str(relative)]
        spec["resources"] = [TLS_FILE]
    files: dict[str, str] = {}
    merges: list[str] = []
    workloads = find_workloads(documents, str(target))
    if staged.node is not None:
        p = staged.node
        workload = workloads[(p.api_version, p.kind, p.name)]
        meta = {"name": p.name, **({"namespace": workload.namespace} if workload.namespace else {})}
        doc = {"apiVersion": p.api_version, "kind": p.kind, "metadata": meta, **p.patch}
        files[p.file_name] = dump_yaml([(f"strategic-merge patch for {p.kind} {p.name}", doc)])
        merges.append(p.file_name)
    deletes = []
    for n in staged.removed:
        key, namespace = identify(documents[n])
        meta = {"name": key[2], **({"namespace": namespace} if namespace else {})}
        deletes.append(
            (None, {"apiVersion": key[0], "kind": key[1], "metadata": meta, "$patch": "delete"})
        )
    if deletes:
        files["retire.yaml"] = dump_yaml(
            [("retire: the plain Typha's objects, deleted", deletes[0][1]), *deletes[1:]]
        )
        merges.append("retire.yaml")
    if merges:
        spec["patchesStrategicMerge"] = merges
    files[KUSTOMIZATION] = dump_yaml(
        [(f"typhapki: the live switch to mTLS, stage {stage} (kubectl kustomize)", spec)]
    )
    files[TLS_FILE] = dump_yaml(
        [
            (f"the TLS Typha (stage {stage}), derived from the base's calico-typha", o)
            for o in staged.added
        ]
    )
    return files, documents
