"""A fake Kubernetes API server on loopback: pods list and eviction, Deployments,
DaemonSets and EndpointSlices, nothing else.

Debian has no kube-apiserver, so this stands in for the two calls `restart-typha`
makes, with the PodDisruptionBudget's real arithmetic (as the disruption controller and
the eviction subresource compute it): expected pods = the Deployment's replicas,
desiredHealthy = expected - maxUnavailable, currentHealthy = pods not terminating, and
an eviction is allowed while currentHealthy - desiredHealthy > 0. An allowed eviction
marks the pod terminating (deletionTimestamp) at once, under one lock, so concurrent
evictions from several nodes see each other. `replace_terminating()` plays the
Deployment controller: each terminating pod goes and a new one starts on the same node.

Two Typha Deployments (the plain one and the live switch's `calico-typha-tls`, docs/
kubernetes.md section 4) each have a budget of their own: a pod's budget is its
Deployment's, found by label selection (`k8s-app=calico-typha` selects no TLS pod), and
a pod two budgets cover gets the API's 500. A Deployment's status (updated, ready,
available replicas) is counted from its pods; its Service's EndpointSlice lists them,
ready or not, with the port named `calico-typha`. The calico-node DaemonSet reports the
status the retire gate reads (observedGeneration, desired, updated, ready) and when it
last changed, in `managedFields`.

TLS with client-certificate authentication (the kubeconfig's client pair) or a bearer
token; a client with neither gets 401, a client certificate from another CA fails the
handshake. `answer` makes the server send fixed bytes instead (hostile answers).
"""

from __future__ import annotations

import base64
import contextlib
import itertools
import json
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.support.cfssl import _tls_files

TOKEN = "typhapki-test-token"


PLAIN_LABELS = {"k8s-app": "calico-typha"}
TLS_LABELS = {"k8s-app": "calico-typha-tls"}


@dataclass
class Pod:
    name: str
    node: str
    started_at: datetime
    terminating: bool = False
    labels: dict[str, str] = field(default_factory=lambda: dict(PLAIN_LABELS))
    ready: bool = True


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    """A matchLabels selector (or a parsed `k=v,k2=v2` labelSelector) against labels."""
    return all(labels.get(k) == v for k, v in selector.items())


def parse_selector(text: str) -> dict[str, str]:
    pairs = [part.partition("=") for part in text.split(",") if part]
    return {k: v for k, _, v in pairs}


@dataclass
class Deployment:
    """A Typha Deployment with its budget (maxUnavailable) and Service."""

    name: str
    labels: dict[str, str]  # its selector, and its pods' labels
    replicas: int
    max_unavailable: int = 1
    generation: int = 1
    observed_generation: int = 1
    port: int = 5473  # the container port named calico-typha
    port_name: str = "calico-typha"
    slices: int = 1  # its Service's endpoints spread over this many EndpointSlices

    @property
    def service(self) -> str:
        return self.name


@dataclass
class DaemonSet:
    """calico-node, as its controller reports it."""

    name: str = "calico-node"
    generation: int = 1
    observed_generation: int = 1
    desired: int = 0
    updated: int = 0
    ready: int = 0
    changed_at: datetime = field(default_factory=lambda: datetime.now(UTC) - timedelta(hours=1))
    without_generation: bool = False  # an answer without metadata.generation


@dataclass
class Cluster:
    """Typha Deployments (`replicas` pods, one per node) and their budgets; without any
    in `deployments`, one plain Typha of `replicas` and `max_unavailable`."""

    namespace: str = "kube-system"
    max_unavailable: int = 1
    pods: dict[str, Pod] = field(default_factory=dict)
    evictions: list[tuple[str, int]] = field(default_factory=list)  # (pod, status)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _serial: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    replicas: int = 0
    deployments: dict[str, Deployment] = field(default_factory=dict)
    daemonsets: dict[str, DaemonSet] = field(default_factory=dict)

    def add(
        self, node: str, started_at: datetime | None = None, deployment: str = "calico-typha"
    ) -> Pod:
        owner = self.deployments.get(deployment)
        pod = Pod(
            f"{deployment}-{next(self._serial):05d}",
            node,
            started_at or datetime.now(UTC) - timedelta(hours=1),
            labels=dict(owner.labels if owner is not None else PLAIN_LABELS),
        )
        self.pods[pod.name] = pod
        return pod

    def deploy(self, deployment: Deployment, nodes: list[str]) -> list[Pod]:
        """A Deployment and one pod of it on each of `nodes`."""
        self.deployments[deployment.name] = deployment
        return [self.add(node, deployment=deployment.name) for node in nodes]

    def pods_of(self, deployment: Deployment) -> list[Pod]:
        return [p for p in self.pods.values() if selects(deployment.labels, p.labels)]

    def status_of(self, deployment: Deployment) -> dict[str, int]:
        live = [p for p in self.pods_of(deployment) if not p.terminating]
        ready = sum(1 for p in live if p.ready)
        return {"observedGeneration": deployment.observed_generation, "replicas": len(live),
                "updatedReplicas": len(live), "readyReplicas": ready,
                "availableReplicas": ready}  # fmt: skip

    def budgets_over(self, pod: Pod) -> list[Deployment]:
        return [d for d in self.deployments.values() if selects(d.labels, pod.labels)]

    def disruptions_allowed(self, pod: Pod | None = None) -> int:
        budgets = self.budgets_over(pod) if pod is not None else []
        if budgets:
            owner = budgets[0]
            healthy = sum(1 for p in self.pods_of(owner) if not p.terminating)
            return healthy - (owner.replicas - owner.max_unavailable)
        healthy = sum(1 for p in self.pods.values() if not p.terminating)
        return healthy - (self.replicas - self.max_unavailable)

    def evict(self, name: str) -> tuple[int, dict[str, Any]]:
        with self.lock:
            pod = self.pods.get(name)
            if pod is None:
                status, body = 404, _status(404, "NotFound", f'pods "{name}" not found')
            elif pod.terminating:  # already going: nothing to budget
                status, body = 201, _status(201, "", "")
            elif len(self.budgets_over(pod)) > 1:  # the eviction subresource's answer
                message = "This pod has more than one PodDisruptionBudget."
                status, body = 500, _status(500, "InternalError", message)
            elif self.disruptions_allowed(pod) <= 0:
                status, body = (
                    429,
                    _status(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                    ),
                )
            else:
                pod.terminating = True
                status, body = 201, _status(201, "", "")
            self.evictions.append((name, status))
            return status, body

    def replace_terminating(self) -> list[Pod]:
        """The Deployment controller's part: terminated pods replaced, same nodes."""
        with self.lock:
            gone = [p for p in self.pods.values() if p.terminating]
            for pod in gone:
                del self.pods[pod.name]
            return [self._again(p, datetime.now(UTC) + timedelta(seconds=2)) for p in gone]

    def _again(self, gone: Pod, started_at: datetime) -> Pod:
        prefix = gone.name.rsplit("-", 1)[0]
        pod = Pod(f"{prefix}-{next(self._serial):05d}", gone.node, started_at,
                  labels=dict(gone.labels))  # fmt: skip
        self.pods[pod.name] = pod
        return pod

    def deployment_json(self, deployment: Deployment) -> dict[str, Any]:
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {
                "name": deployment.name,
                "namespace": self.namespace,
                "generation": deployment.generation,
            },
            "spec": {
                "replicas": deployment.replicas,
                "selector": {"matchLabels": deployment.labels},
            },
            "status": self.status_of(deployment),
        }

    def endpointslice_json(self, deployment: Deployment) -> list[dict[str, Any]]:
        """Its Service's EndpointSlices: the endpoints dealt over `deployment.slices`."""
        endpoints = [
            {
                "addresses": [f"10.0.0.{i + 1}"],
                "conditions": {
                    "ready": p.ready and not p.terminating,
                    "terminating": p.terminating,
                },
                "nodeName": p.node,
            }
            for i, p in enumerate(sorted(self.pods_of(deployment), key=lambda p: p.name))
        ]
        return [
            {
                "metadata": {
                    "name": f"{deployment.service}-{n:05x}",
                    "namespace": self.namespace,
                    "labels": {"kubernetes.io/service-name": deployment.service},
                },
                "addressType": "IPv4",
                "ports": [
                    {"name": deployment.port_name, "port": deployment.port, "protocol": "TCP"}
                ],
                "endpoints": endpoints[n :: deployment.slices],
            }
            for n in range(deployment.slices)
        ]


def daemonset_json(ds: DaemonSet, namespace: str) -> dict[str, Any]:
    stamp = ds.changed_at.strftime("%Y-%m-%dT%H:%M:%SZ")
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": ds.name,
            "namespace": namespace,
            **({} if ds.without_generation else {"generation": ds.generation}),
            "managedFields": [
                {"manager": "helm", "operation": "Update", "time": stamp},
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "subresource": "status",
                    "time": now,
                },
            ],
        },
        "status": {
            "observedGeneration": ds.observed_generation,
            "desiredNumberScheduled": ds.desired,
            "updatedNumberScheduled": ds.updated,
            "numberReady": ds.ready,
        },
    }


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    ok = 200 <= code < 300
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Success" if ok else "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


def _pod_json(pod: Pod, namespace: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": pod.name, "namespace": namespace, "labels": pod.labels}
    if pod.terminating:
        meta["deletionTimestamp"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "metadata": meta,
        "spec": {"nodeName": pod.node},
        "status": {"startTime": pod.started_at.strftime("%Y-%m-%dT%H:%M:%SZ")},
    }


@dataclass(frozen=True)
class Answer:
    """Fixed bytes to send instead of the API's answer."""

    status: int
    body: bytes
    content_length: int | None = None  # None: the body's length


class FakeApi:
    """The server: its URL, the CA that signed its certificate, client credentials."""

    def __init__(self, directory: Path, cluster: Cluster) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        self.ca, cert, key = _tls_files(directory)
        self.client_ca, self.client_cert, self.client_key = _client_files(directory)
        self.answer: Answer | None = None
        # An API (or a proxy in front of it) that drops the fieldSelector: every node's
        # Typha pods are listed, as a buggy or hostile server might.
        self.ignore_field_selector = False
        # The same for EndpointSlices' label selector: every Service's slices listed.
        self.ignore_label_selector = False
        self.requests: list[tuple[str, str]] = []  # (method, path)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        context.load_verify_locations(self.client_ca)
        context.verify_mode = ssl.CERT_OPTIONAL  # a token client presents none
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"https://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def kubeconfig(self, path: Path, *, token: bool = False, inline: bool = True) -> Path:
        """A kubeconfig for this server: the client pair (inline data or file paths) or
        the bearer token."""

        def data(p: Path) -> str:
            return base64.b64encode(p.read_bytes()).decode()

        if token:
            user: dict[str, Any] = {"token": TOKEN}
        elif inline:
            user = {
                "client-certificate-data": data(self.client_cert),
                "client-key-data": data(self.client_key),
            }
        else:
            user = {"client-certificate": str(self.client_cert), "client-key": str(self.client_key)}
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "fake",
            "clusters": [
                {
                    "name": "fake",
                    "cluster": {
                        "server": self.url,
                        "certificate-authority-data": data(self.ca),
                    },
                }
            ],
            "users": [{"name": "node", "user": user}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "node"}}],
        }
        path.write_text(json.dumps(doc, indent=1))  # JSON is YAML
        path.chmod(0o600)  # it holds the credentials (docs/security.md)
        return path


def _client_files(directory: Path) -> tuple[Path, Path, Path]:
    """A client CA (the API's, as kubeadm makes one) and a node's client pair from it."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    from typhapki.pki.profiles import build_ca, cert_pem, key_pem

    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = build_ca(ca_key, "kubernetes", 30, now)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, "system:node:node-a"),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=30))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    paths = directory / "client-ca.pem", directory / "client.pem", directory / "client-key.pem"
    paths[0].write_bytes(cert_pem(ca))
    paths[1].write_bytes(cert_pem(cert))
    paths[2].write_bytes(key_pem(key))
    paths[2].chmod(0o600)
    return paths


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send(self, status: int, body: bytes, length: int | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body) if length is None else length))
            self.send_header("Connection", "close")
            self.end_headers()
            with contextlib.suppress(OSError):
                self.wfile.write(body)
            self.close_connection = True

        def _authorised(self) -> bool:
            if self.connection.getpeercert():
                return True
            return self.headers.get("Authorization") == f"Bearer {TOKEN}"

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            api.requests.append((method, self.path))
            if api.answer is not None:
                self._send(api.answer.status, api.answer.body, api.answer.content_length)
                return
            if not self._authorised():
                self._send(401, json.dumps(_status(401, "Unauthorized", "Unauthorized")).encode())
                return
            cluster = api.cluster
            parts = urlsplit(self.path)
            segments = parts.path.strip("/").split("/")
            if method == "GET" and segments[:2] in (["apis", "apps"], ["apis", "discovery.k8s.io"]):
                self._workloads(segments, parse_qs(parts.query))
            elif (
                len(segments) < 5
                or segments[:3] != ["api", "v1", "namespaces"]
                or (segments[4] != "pods")
            ):
                self._send(404, json.dumps(_status(404, "NotFound", "not found")).encode())
            elif method == "GET" and len(segments) == 5:
                query = parse_qs(parts.query)
                label = query.get("labelSelector", [""])[0]
                field_sel = query.get("fieldSelector", [""])[0]
                node = field_sel.removeprefix("spec.nodeName=")
                selector = parse_selector(label)
                with cluster.lock:
                    items = [
                        _pod_json(p, cluster.namespace)
                        for p in cluster.pods.values()
                        if selects(selector, p.labels)
                        and (not field_sel or api.ignore_field_selector or p.node == node)
                        and segments[3] == cluster.namespace  # another namespace: empty
                    ]
                if "limit" in query:
                    items = items[: int(query["limit"][0])]
                doc = {"kind": "PodList", "apiVersion": "v1", "items": items}
                self._send(200, json.dumps(doc).encode())
            elif method == "POST" and len(segments) == 7 and segments[6] == "eviction":
                eviction = json.loads(body)
                assert eviction["apiVersion"] == "policy/v1" and eviction["kind"] == "Eviction"
                assert eviction["metadata"]["name"] == segments[5]
                if segments[3] != cluster.namespace:
                    status, doc = 404, _status(404, "NotFound", f'pods "{segments[5]}" not found')
                else:
                    status, doc = cluster.evict(segments[5])
                self._send(status, json.dumps(doc).encode())
            else:
                self._send(405, json.dumps(_status(405, "MethodNotAllowed", "no")).encode())

        def _workloads(self, segments: list[str], query: dict[str, list[str]]) -> None:
            """apps/v1 deployments and daemonsets by name, discovery.k8s.io/v1
            endpointslices by the service-name label."""
            cluster = api.cluster
            missing = json.dumps(_status(404, "NotFound", "not found")).encode()
            if len(segments) < 6 or segments[3] != "namespaces" or segments[4] != cluster.namespace:
                self._send(404, missing)
                return
            kind, name = segments[5], (segments[6] if len(segments) > 6 else None)
            with cluster.lock:
                if kind == "deployments" and name in cluster.deployments:
                    doc = cluster.deployment_json(cluster.deployments[name])
                elif kind == "daemonsets" and name in cluster.daemonsets:
                    doc = daemonset_json(cluster.daemonsets[name], cluster.namespace)
                elif kind == "endpointslices" and name is None:
                    wanted = parse_selector(query.get("labelSelector", [""])[0])
                    slices = [s for d in cluster.deployments.values()
                              for s in cluster.endpointslice_json(d)]  # fmt: skip
                    doc = {"kind": "EndpointSliceList", "apiVersion": "discovery.k8s.io/v1",
                           "items": [s for s in slices if api.ignore_label_selector
                                     or selects(wanted, s["metadata"]["labels"])]}  # fmt: skip
                else:
                    self._send(404, missing)
                    return
            self._send(200, json.dumps(doc).encode())

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

    return Handler
