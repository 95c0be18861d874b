"""How far the live switch's rollouts are, as the API says (docs/kubernetes.md section 4,
docs/fleet.md): what the gates between the stages read.

- The TLS Typha Deployment: fully available when the controller has seen its latest
  spec (`status.observedGeneration` >= `metadata.generation`) and `updatedReplicas`,
  `readyReplicas` and `availableReplicas` all equal `spec.replicas` (what `kubectl
  rollout status` waits for, and what tigera-operator's migration waits for).
- Its Service's endpoints, from the EndpointSlices labelled
  `kubernetes.io/service-name`, as Felix reads them since Calico 3.31: each endpoint's
  node, whether it is ready, and the port named `calico-typha` (the name Felix looks
  for, typha/pkg/discovery/discovery.go).
- The calico-node DaemonSet: rolled out when `observedGeneration` is current and
  `updatedNumberScheduled` = `numberReady` = `desiredNumberScheduled`; and when it last
  changed: the latest `metadata.managedFields[].time` outside the status subresource
  (a `helm upgrade`, a rollback, a `kubectl apply` each stamp one).

Every call goes through the eviction client's one deadline and its checks
(typhapki/kubernetes/eviction.py `KubeApi.get`): anything the API answers that is not
this shape is a KubeApiError (exit 7), one line, the server's text escaped.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any
from urllib.parse import urlencode

from typhapki.errors import KubeApiError
from typhapki.kubernetes.eviction import KubeApi, _timestamp
from typhapki.pki.signers.cfssl import server_text
from typhapki.record import record
from typhapki.typhaports import PORT_NAME

SERVICE_LABEL = "kubernetes.io/service-name"


def _count(value: object, what: str, url: str) -> int:
    if value is None:
        return 0  # the API omits zero counts
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise KubeApiError(f"{url}: {what}: expected a count, got {server_text(str(value), 40)}")
    return value


def _object(doc: Any, kind: str, name: str, url: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """metadata and status of the object `name` of `kind`, checked to be that one."""
    meta, status = doc.get("metadata"), doc.get("status", {})
    if doc.get("kind") not in (None, kind) or not isinstance(meta, dict):
        raise KubeApiError(f"{url}: not a {kind}")
    if meta.get("name") != name:
        got = server_text(str(meta.get("name")), 80)
        raise KubeApiError(f"{url}: the API answered with {kind} {got}, not {name}")
    if not isinstance(status, dict):
        raise KubeApiError(f"{url}: status: expected a mapping")
    return meta, status


def _generation(meta: dict[str, Any], url: str) -> int | None:
    """metadata.generation; None when absent: the API always sets it, so an object
    without one is not what the controller reports on, and never counts as current."""
    if meta.get("generation") is None:
        return None
    return _count(meta.get("generation"), "metadata.generation", url)


@record(frozen=True)
class DeploymentStatus:
    name: str
    generation: int | None  # None: the API gave none, so currency is unknown
    observed: int
    replicas: int
    updated: int
    ready: int
    available: int

    def problems(self) -> list[str]:
        """Why it is not fully available (empty when it is)."""
        found = []
        if self.generation is None:
            found.append("no metadata.generation: whether the controller saw its spec is unknown")
        elif self.observed < self.generation:
            found.append(f"observedGeneration {self.observed} < generation {self.generation}")
        if self.replicas == 0:
            found.append("0 replicas wanted")
        for what, count in (("updated", self.updated), ("ready", self.ready),
                            ("available", self.available)):  # fmt: skip
            if count != self.replicas:
                found.append(f"{count} of {self.replicas} replicas {what}")
        return found


def deployment_status(api: KubeApi, namespace: str, name: str) -> DeploymentStatus:
    path = f"/apis/apps/v1/namespaces/{namespace}/deployments/{name}"
    url = api.url(path)
    doc = api.get(path, f"Deployment {name}", "get deployments")
    meta, status = _object(doc, "Deployment", name, url)
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise KubeApiError(f"{url}: spec: expected a mapping")
    replicas = spec.get("replicas", 1)  # the API's default
    return DeploymentStatus(
        name,
        _generation(meta, url),
        _count(status.get("observedGeneration"), "status.observedGeneration", url),
        _count(replicas, "spec.replicas", url),
        _count(status.get("updatedReplicas"), "status.updatedReplicas", url),
        _count(status.get("readyReplicas"), "status.readyReplicas", url),
        _count(status.get("availableReplicas"), "status.availableReplicas", url),
    )


@record(frozen=True)
class DaemonSetStatus:
    name: str
    generation: int | None  # None: the API gave none, so currency is unknown
    observed: int
    desired: int
    updated: int
    ready: int
    changed_at: datetime | None  # its last change (managedFields), None: unknown

    def problems(self) -> list[str]:
        """Why its rollout is not complete (empty when it is)."""
        found = []
        if self.generation is None:
            found.append("no metadata.generation: whether the controller saw its spec is unknown")
        elif self.observed < self.generation:
            found.append(f"observedGeneration {self.observed} < generation {self.generation}")
        if self.desired == 0:
            found.append("0 pods desired")
        if not self.updated == self.ready == self.desired:
            found.append(f"{self.updated} updated, {self.ready} ready, {self.desired} desired")
        if self.changed_at is None:
            found.append("no managedFields time: when it last changed is unknown")
        return found


def _changed_at(meta: dict[str, Any], url: str) -> datetime | None:
    fields = meta.get("managedFields", [])
    if not isinstance(fields, list):
        raise KubeApiError(f"{url}: metadata.managedFields: expected a list")
    times = []
    for entry in fields:
        if not isinstance(entry, dict):
            raise KubeApiError(f"{url}: metadata.managedFields[]: expected a mapping")
        if entry.get("subresource") == "status":
            continue  # the controller reporting, not a change of the DaemonSet
        when = entry.get("time")
        parsed = _timestamp(when) if isinstance(when, str) else None
        if parsed is None:
            raise KubeApiError(f"{url}: metadata.managedFields[].time: not an RFC 3339 time")
        times.append(parsed)
    return max(times, default=None)


def daemonset_status(api: KubeApi, namespace: str, name: str) -> DaemonSetStatus:
    path = f"/apis/apps/v1/namespaces/{namespace}/daemonsets/{name}"
    url = api.url(path)
    doc = api.get(path, f"DaemonSet {name}", "get daemonsets")
    meta, status = _object(doc, "DaemonSet", name, url)
    return DaemonSetStatus(
        name,
        _generation(meta, url),
        _count(status.get("observedGeneration"), "status.observedGeneration", url),
        _count(status.get("desiredNumberScheduled"), "status.desiredNumberScheduled", url),
        _count(status.get("updatedNumberScheduled"), "status.updatedNumberScheduled", url),
        _count(status.get("numberReady"), "status.numberReady", url),
        _changed_at(meta, url),
    )


@record(frozen=True)
class Endpoint:
    node: str | None  # spec's nodeName: which member hosts it
    ready: bool  # conditions.ready is true (unset counts as not ready here)
    port: int | None  # the port named calico-typha in its slice, None: no such port


def service_endpoints(api: KubeApi, namespace: str, service: str) -> list[Endpoint]:
    """The endpoints of `service` from its EndpointSlices, with the port named
    calico-typha. A slice of another Service (a server or proxy that dropped the label
    selector) is a KubeApiError: it would vouch for the wrong Typhas."""
    query = urlencode({"labelSelector": f"{SERVICE_LABEL}={service}"})
    path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?{query}"
    url = api.url(path)
    doc = api.get(path, "an EndpointSlice list", "list endpointslices")
    items = doc.get("items")
    if not isinstance(items, list):
        raise KubeApiError(f"{url}: HTTP 200 without an EndpointSlice list")
    found: list[Endpoint] = []
    for item in items:
        meta = item.get("metadata") if isinstance(item, dict) else None
        labels = meta.get("labels") if isinstance(meta, dict) else None
        if not isinstance(labels, dict) or labels.get(SERVICE_LABEL) != service:
            raise KubeApiError(f"{url}: a listed EndpointSlice is not {service}'s")
        ports = item.get("ports") or []
        endpoints = item.get("endpoints") or []
        if not isinstance(ports, list) or not isinstance(endpoints, list):
            raise KubeApiError(f"{url}: an EndpointSlice is not what the API gives")
        named = [p.get("port") for p in ports if isinstance(p, dict) and p.get("name") == PORT_NAME]
        port = named[0] if len(named) == 1 else None
        if port is not None and (isinstance(port, bool) or not isinstance(port, int)):
            raise KubeApiError(f"{url}: port {PORT_NAME}: expected a number")
        for endpoint in endpoints:
            if not isinstance(endpoint, dict):
                raise KubeApiError(f"{url}: an endpoint is not a mapping")
            conditions = endpoint.get("conditions", {})
            node = endpoint.get("nodeName")
            if not isinstance(conditions, dict) or not (node is None or isinstance(node, str)):
                raise KubeApiError(f"{url}: an endpoint is not what the API gives")
            found.append(Endpoint(node, conditions.get("ready") is True, port))
    return found
